"""training.cuda_graphs (ctxnmt.training.graphs) on the CPU: what a CUDA graph of the training
step holds, without the capture itself (tests/models/test_gpu_cuda.py checks that on a GPU).

- A batch padded to its graph shape (rows and lengths rounded up to 16, rows added with one
  PAD source token and no target) gives, through `padded_loss`, the loss and gradients of the
  unpadded batch through `loss`, for every sentence-level variant.
- Nothing in that forward and backward pass would make a GPU wait for the host (a scalar read
  back, a shape that depends on the data), while `loss` does: the check is seen to work.
- The option is refused, with one line, where a graph cannot serve."""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ctxnmt.config import ModelConfig, load_config
from ctxnmt.data.batching import make_batch
from ctxnmt.data.indexed import Side
from ctxnmt.data.vocab import EOS, PAD
from ctxnmt.errors import ConfigError
from ctxnmt.models.cells import GRUCell
from ctxnmt.models.functional import linear_cross_entropy, padded_bigru
from ctxnmt.models.nmt import build_model
from ctxnmt.training.graphs import Shape, pad_to, padded_shape, round_up
from tests.training.conftest import tiny_config

SRC = [[5, 6, 7, 8, 9, 4], [10, 11], [4, 12, 13, 5, 6], [7, 7, 8]]
TGT = [[5, 9, 7, EOS], [8, 6, 5, 4, 11, 12, EOS], [13, EOS], [9, 10, 11, EOS]]
VARIANTS = [
    {},
    {"target_context": "mean"},
    {"target_context": "self-attentive"},
    {"decoder": "memory-rnn"},
    {"decoder": "self-attentive-rnn", "output": "adaptive"},
    {"encoder": "bcae", "cell": "adaptive-gru"},
    {"encoder": "stacked-birnn", "encoder_layers": 2},
]


def _batch():
    return make_batch(list(range(len(SRC))), Side.from_lists(SRC), Side.from_lists(TGT))


def test_padded_shape_rounds_rows_and_lengths_up_to_sixteen():
    batch = _batch()
    assert padded_shape(batch) == Shape(16, 16, 16)
    assert [round_up(n) for n in (1, 16, 17, 80, 81)] == [16, 16, 32, 80, 96]


def test_added_rows_have_one_source_token_and_no_target():
    batch = _batch()
    src, src_mask, tgt, tgt_mask = pad_to(batch, Shape(8, 10, 9))
    assert src.shape == src_mask.shape == (8, 10) and tgt.shape == tgt_mask.shape == (8, 9)
    assert torch.equal(src[:4, :6], batch.src) and torch.equal(tgt[:4, :7], batch.tgt)
    assert torch.equal(src_mask[:4, :6], batch.src_mask) and torch.equal(tgt_mask[:4, :7], batch.tgt_mask)
    assert (src[4:] == PAD).all() and src_mask[4:].sum(1).tolist() == [1.0] * 4 and src_mask[4:, 0].eq(1).all()
    assert tgt_mask[4:].sum() == 0 and src_mask[:4, 6:].sum() == 0 and tgt_mask[:4, 7:].sum() == 0


def _loss_and_grads(model, loss):
    model.zero_grad()
    nll = loss()
    nll.backward()
    return nll.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("switches", VARIANTS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "rnnsearch")
def test_padded_loss_of_the_padded_batch_equals_the_loss_of_the_batch(switches):
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=7, init="pytorch", dropout_emb=0.0,
                                    dropout_hidden=0.0, dropout_out=0.0, **switches), 16, 16)
    batch = _batch()
    padded = pad_to(batch, padded_shape(batch))
    expected, expected_grads = _loss_and_grads(
        model, lambda: model.loss(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask, 0.1)[0])
    got, grads = _loss_and_grads(model, lambda: model.padded_loss(*padded, 0.1))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-6)
    assert grads.keys() == expected_grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(g, expected_grads[name], atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("kernels", [True, False], ids=["fused", "pytorch"])
def test_rows_kept_weighs_each_row_of_the_cross_entropy(smoothing, kernels, monkeypatch):
    """Σ_i k_i · CE(x_i Wᵀ + b, t_i) (F.cross_entropy's label smoothing), forward and gradients,
    through the fused CPU kernel and the PyTorch expression."""
    if not kernels:
        monkeypatch.setattr("ctxnmt.models.functional._fusable", lambda *tensors: False)
    torch.manual_seed(1)
    x = torch.randn(7, 5, requires_grad=True)
    W, b = torch.randn(11, 5, requires_grad=True), torch.randn(11, requires_grad=True)
    t = torch.randint(0, 11, (7,))
    kept = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    got = linear_cross_entropy(x, W, b, t, smoothing, chunk=3, rows_kept=kept)
    per_row = torch.nn.functional.cross_entropy(x @ W.t() + b, t, reduction="none", label_smoothing=smoothing)
    expected = (per_row * kept).sum()
    torch.testing.assert_close(got, expected)
    for g, e in zip(torch.autograd.grad(got, (x, W, b)), torch.autograd.grad(expected, (x, W, b))):
        torch.testing.assert_close(g, e)
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(x, W, b, t, smoothing, rows_kept=kept), expected)


class HostWaits(TorchDispatchMode):
    """Records the operations that would make a GPU hand a value to the host, or whose
    output's shape depends on the data: none may sit inside a CUDA graph."""

    WAITS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default,
             torch.ops.aten.masked_select.default, torch.ops.aten.item.default}

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        boolean_index = func is torch.ops.aten.index.Tensor and any(
            i is not None and i.dtype == torch.bool for i in args[1])
        if func in self.WAITS or boolean_index:
            self.seen.append(str(func))
        return func(*args, **kwargs)


@pytest.mark.parametrize("switches", VARIANTS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "rnnsearch")
def test_nothing_in_the_padded_step_waits_for_the_host(switches, monkeypatch):
    """Through the PyTorch expressions that CUDA runs (the fused CPU kernels are the CPU's alone)."""
    monkeypatch.setattr("ctxnmt.models.functional._fusable", lambda *tensors: False)
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=7, dropout_out=0.2, **switches), 16, 16)
    batch = _batch()
    padded = pad_to(batch, padded_shape(batch))
    with HostWaits() as waits:
        model.padded_loss(*padded, 0.1).backward()
    assert waits.seen == []
    with HostWaits() as waits:  # the eager loss counts its tokens on the host: the check sees it
        model.loss(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask, 0.1)
    assert waits.seen


def test_the_encoders_graph_form_waits_for_nothing():
    f, b = GRUCell(5, 4), GRUCell(5, 4)
    x = torch.randn(3, 6, 5, requires_grad=True)
    mask = torch.tensor([[1.0] * 6, [1, 1, 0, 0, 0, 0], [1] * 5 + [0]])
    with HostWaits() as waits:
        torch.cat(padded_bigru(x, f.stored_weights(), b.stored_weights(), None, mask), -1).sum().backward()
    assert waits.seen == []


@pytest.mark.parametrize("sets, named", [
    (["training.device=cpu"], "training.device cuda (got 'cpu')"),
    (["training.device=cuda", "training.precision=fp16"], "precision fp32 or bf16 (got 'fp16')"),
    (["training.device=cuda", "model.doc_aux=gated-aux"], "a sentence-level model"),
])
def test_cuda_graphs_is_refused_where_a_graph_cannot_serve(tiny_corpus, tmp_path, sets, named):
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "run")
    with pytest.raises(ConfigError, match="training.cuda_graphs needs") as err:
        load_config(cfg, ["training.cuda_graphs=true", *sets])
    assert named in str(err.value) and "\n" not in str(err.value)
    load_config(cfg, ["training.cuda_graphs=true", "training.device=cuda"])  # where it can serve, it loads
