"""The GPU paths of functional.py (issue 33), checked on the CPU: the bidirectional GRU through
torch's GRU (cuDNN's on CUDA) against functional.biscan and against the whole model's default
path, forward and gradients, on padded batches; which tensors it leaves to the fused CPU
kernels; and the casts of bf16 autocast counted, not timed: once per forward pass, not once
per time step.  Their CUDA side is tests/models/test_gpu_cuda.py."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.data.vocab import EOS
from ctxnmt.models import encoders, functional
from ctxnmt.models.cells import GRUCell
from ctxnmt.models.functional import bigru, biscan, gru_gates, packed_bigru, padded_bigru
from ctxnmt.models.nmt import build_model
from tests.models.test_gpu_cuda import WeightCasts

SRC = [[5, 6, 7, 8, 9, 4], [10, 11], [4, 12, 13, 5, 6]]
TGT = [[5, 9, 7, EOS], [8, 6, 5, 4, 11, 12, EOS], [13, EOS]]
MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]], dtype=torch.float32)


def _lengths(mask):
    return mask.sum(1).long()


def _cells(n_in=5, hidden=4):
    torch.manual_seed(0)
    f, b = GRUCell(n_in, hidden), GRUCell(n_in, hidden)
    with torch.no_grad():  # non-zero biases, so that where each one enters is checked
        f.W.bias.normal_()
        b.W.bias.normal_()
    return f, b


def _packed(x, forward, backward, h0, mask):
    return packed_bigru(x, forward, backward, h0, mask, _lengths(mask))


@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("through", [_packed, padded_bigru], ids=["packed", "padded"])
def test_torch_gru_bigru_equals_biscan_with_gradients(with_h0, through):
    """Both cuDNN forms (packed: eager; padded, rows reversed in place: inside a CUDA graph)."""
    f, b = _cells()
    x = torch.randn(3, 6, 5, requires_grad=True)
    h0 = torch.randn(3, 4, requires_grad=True) if with_h0 else None
    start = h0 if with_h0 else torch.zeros(3, 4)
    expected = biscan(f, b, f.input_proj(x), b.input_proj(x), start, MASK)
    got = through(x, f.stored_weights(), b.stored_weights(), h0, MASK)
    for e, g in zip(expected, got):  # padding included: held states, as biscan holds them
        torch.testing.assert_close(g, e, atol=1e-6, rtol=0)
    weights = torch.randn(3, 6, 8)  # a loss that reads every position of both directions
    params = [x, *f.parameters(), *b.parameters()] + ([h0] if with_h0 else [])
    grads = torch.autograd.grad((torch.cat(got, -1) * weights).sum(), params)
    reference = torch.autograd.grad((torch.cat(expected, -1) * weights).sum(), params)
    for g, r in zip(grads, reference):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=0)


def test_packed_bigru_keeps_float32_under_bf16_autocast():
    """cuDNN's RNN serves float32 and float16, not everywhere bfloat16: under bf16 autocast the
    recurrence runs in float32 (functional.packed_bigru)."""
    f, b = _cells()
    x = torch.randn(3, 6, 5)
    plain = packed_bigru(x, f.stored_weights(), b.stored_weights(), None, MASK, _lengths(MASK))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = packed_bigru(x, f.stored_weights(), b.stored_weights(), None, MASK, _lengths(MASK))
    for p, m in zip(plain, mixed):
        assert m.dtype == torch.float32
        torch.testing.assert_close(m, p)


def test_bigru_on_the_cpu_is_biscan_with_the_fused_kernels():
    f, b = _cells()
    x = torch.randn(3, 6, 5)
    expected = biscan(f, b, f.input_proj(x), b.input_proj(x), torch.zeros(3, 4), MASK)
    for e, g in zip(expected, bigru(x, f.stored_weights(), b.stored_weights(), None, MASK)):
        assert torch.equal(g, e)


@pytest.mark.parametrize("mask, lengths", [
    ([[1, 1, 0], [1, 0, 0]], [2, 1]),
    ([[1, 0, 1], [1, 1, 1]], None),  # a hole: not a prefix
    ([[1, 1, 1], [0, 0, 0]], None),  # an empty row: the packed GRU needs one token
])
def test_prefix_lengths(mask, lengths):
    got = functional._prefix_lengths(torch.tensor(mask, dtype=torch.float32))
    assert (got is None and lengths is None) or got.tolist() == lengths


def _small_model(**overrides):
    torch.manual_seed(0)
    sizes = {"emb_dim": 8, "hidden_dim": 10, "att_dim": 9, **overrides}
    cfg = ModelConfig.of(dropout_out=0.0, init="pytorch", **sizes)
    return build_model(cfg, 16, 16)


def _loss_and_grads(model):
    src, src_mask = pad(SRC)
    tgt, tgt_mask = pad(TGT)
    model.zero_grad()
    nll, _ = model.loss(src, src_mask, tgt, tgt_mask)
    nll.backward()
    return nll.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _bigru_on_any_device(x, forward, backward, h0, mask):
    """bigru as it decides on CUDA, here on the CPU."""
    lengths = functional._prefix_lengths(mask)
    return None if lengths is None else packed_bigru(x, forward, backward, h0, mask, lengths)


@pytest.mark.parametrize("overrides", [{}, {"encoder": "stacked-birnn"}, {"doc_init_enc": True}],
                         ids=["birnn", "stacked-birnn", "doc-init-enc"])
def test_model_through_the_packed_gru_equals_its_default_path(monkeypatch, overrides):
    model = _small_model(**overrides)
    expected_loss, expected = _loss_and_grads(model)
    calls = []

    def recorded(*args):
        calls.append(1)
        return _bigru_on_any_device(*args)

    monkeypatch.setattr(encoders, "bigru", recorded)
    loss, grads = _loss_and_grads(model)
    assert calls  # the encoder went through it
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=0)
    assert grads.keys() == expected.keys()
    for name, g in grads.items():
        torch.testing.assert_close(g, expected[name], atol=1e-5, rtol=1e-5, msg=name)


def test_other_cells_keep_their_own_scan(monkeypatch):
    model = _small_model(cell="adaptive-gru")
    monkeypatch.setattr(encoders, "bigru", lambda *args: pytest.fail("bigru runs the plain GRU only"))
    _loss_and_grads(model)


def test_gru_gates_without_a_kernel_for_the_tensors_runs_the_pytorch_expression():
    """Where no fused kernel serves (here: float64 on the CPU) gru_gates runs the PyTorch
    expression itself, and so does cells.GRUCell through it."""
    xp, hp, h = torch.randn(2, 9, dtype=torch.double), torch.randn(2, 9, dtype=torch.double), torch.randn(2, 3)
    assert torch.equal(gru_gates(xp, hp, h.double()), GRUCell.reference_combine(xp, hp, h.double()))
    cell = GRUCell(4, 3).double()
    torch.testing.assert_close(cell.combine(xp, hp, h.double()), GRUCell.reference_combine(xp, hp, h.double()))


def _recurrent_casts(model, length: int) -> int:
    """bf16 casts of recurrent matrices in one training forward and backward pass over
    sentences of `length` tokens (source and target)."""
    H, A = model.cfg.hidden_dim, model.cfg.att_dim
    shapes = {(H, 3 * H), (2, H, 3 * H), (H, A + 3 * H)}  # U, both encoder U stacked, [W_d, U]
    src, src_mask = pad([[4 + i % 9 for i in range(length)]] * 3)
    tgt, tgt_mask = pad([[4 + i % 7 for i in range(length - 1)] + [EOS]] * 3)
    counter = WeightCasts(shapes)
    with counter, torch.autocast("cpu", dtype=torch.bfloat16):
        nll, _ = model.loss(src, src_mask, tgt, tgt_mask)
    nll.backward()
    return counter.count


def test_bf16_casts_the_recurrent_matrices_once_per_forward_pass(monkeypatch):
    model = _small_model(hidden_dim=12, att_dim=7)
    short, long = _recurrent_casts(model, 3), _recurrent_casts(model, 9)
    assert short == long == 3  # the encoder's stacked U, the decoder's U_1 and [W_d, U_2]
    # Before cast_once, autocast cast them at every step: the count is what tells them apart.
    monkeypatch.setattr(functional, "GPU_PATHS", False)
    assert _recurrent_casts(model, 9) > _recurrent_casts(model, 3) > 3


def test_bf16_loss_stays_close_to_float32():
    model = _small_model(hidden_dim=12, att_dim=7)
    expected, grads32 = _loss_and_grads(model)
    src, src_mask = pad(SRC)
    tgt, tgt_mask = pad(TGT)
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        nll, _ = model.loss(src, src_mask, tgt, tgt_mask)
    nll.backward()
    assert nll.dtype == torch.float32  # the loss and its softmax stay float32
    assert abs(float(nll.detach()) - float(expected)) <= 1e-2 * float(expected)
    assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)  # fp32 masters
    full32 = torch.cat([g.flatten() for g in grads32.values()])
    full16 = torch.cat([dict(model.named_parameters())[n].grad.flatten() for n in grads32])
    assert (full16 - full32).norm() <= 2e-2 * full32.norm()
