"""The GPU paths of functional.py on CUDA (issue 33): the fused GRU gates, the encoder through
cuDNN and the casts of bf16 autocast, each against the plain PyTorch path (CTXNMT_GPU_FAST=0's,
functional.GPU_PATHS False), forward and gradients.  Skipped without a GPU; their CPU side is
tests/models/test_gpu_paths.py.

The GPU machine may lack pytest: benchmarks/gpu_check.sh then runs these checks with
`python -m tests.models.test_gpu_cuda`, which calls every test_ function and exits non-zero if
one fails.  Float32 comparisons switch TF32 off (PyTorch lets cuDNN use it by default), so
that they compare arithmetic, not precisions."""
from __future__ import annotations

import contextlib
import math
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.data.vocab import EOS
from ctxnmt.models import functional
from ctxnmt.models.cells import GRUCell
from ctxnmt.models.functional import biscan
from ctxnmt.models.nmt import build_model

try:
    import pytest

    needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
except ImportError:  # run by hand (see above)
    def needs_cuda(test):
        return test

SRC = [[5, 6, 7, 8, 9, 4], [10, 11], [4, 12, 13, 5, 6]]
TGT = [[5, 9, 7, EOS], [8, 6, 5, 4, 11, 12, EOS], [13, EOS]]


class WeightCasts(TorchDispatchMode):
    """Counts casts to bfloat16 of tensors of the given shapes (the recurrent matrices')."""

    def __init__(self, shapes):
        super().__init__()
        self.shapes, self.count = shapes, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.bfloat16
                and tuple(args[0].shape) in self.shapes):
            self.count += 1
        return func(*args, **kwargs)


@contextlib.contextmanager
def gpu_paths(on: bool):
    saved, functional.GPU_PATHS = functional.GPU_PATHS, on
    try:
        yield
    finally:
        functional.GPU_PATHS = saved


@contextlib.contextmanager
def ieee_float32():
    """No TF32 anywhere, forward and backward passes alike."""
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        saved, torch.backends.cuda.matmul.allow_tf32 = torch.backends.cuda.matmul.allow_tf32, False
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved


def _model(**overrides):
    torch.manual_seed(0)
    sizes = {"emb_dim": 8, "hidden_dim": 12, "att_dim": 7, **overrides}
    return build_model(ModelConfig.of(dropout_out=0.0, init="pytorch", **sizes), 16, 16).cuda()


def _batch():
    src, src_mask = pad(SRC)
    tgt, tgt_mask = pad(TGT)
    return [t.cuda() for t in (src, src_mask, tgt, tgt_mask)]


def _loss_and_grads(model, bf16: bool = False):
    model.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        nll, _ = model.loss(*_batch())
    nll.backward()
    return nll.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _close(got, expected, tol, what):
    err = float((got.float() - expected.float()).abs().max())
    assert err <= tol, f"{what}: max difference {err:.3g} > {tol:g}"


@needs_cuda
def test_fused_gates_equal_the_reference_with_gradients():
    torch.manual_seed(1)
    xp, hp = torch.randn(5, 12, device="cuda", requires_grad=True), torch.randn(5, 12, device="cuda", requires_grad=True)
    h = torch.randn(5, 4, device="cuda", requires_grad=True)
    mask = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0], device="cuda")
    for m in (None, mask):
        fused = functional.gru_gates(xp, hp, h, m)
        assert fused is not None, "the fused CUDA cell did not serve float32"
        plain = GRUCell.reference_combine(xp, hp, h)
        plain = plain if m is None else h + m.unsqueeze(-1) * (plain - h)
        _close(fused, plain, 1e-6, "gates")
        weights = torch.randn_like(h)
        for g, r in zip(torch.autograd.grad((fused * weights).sum(), (xp, hp, h)),
                        torch.autograd.grad((plain * weights).sum(), (xp, hp, h))):
            _close(g, r, 1e-5, "gate gradients")


@needs_cuda
def test_bigru_through_cudnn_equals_biscan_with_gradients():
    torch.manual_seed(0)
    f, b = GRUCell(5, 4).cuda(), GRUCell(5, 4).cuda()
    x = torch.randn(3, 6, 5, device="cuda", requires_grad=True)
    h0 = torch.randn(3, 4, device="cuda", requires_grad=True)
    mask = torch.tensor([[1] * 6, [1, 1, 0, 0, 0, 0], [1] * 5 + [0]], dtype=torch.float32, device="cuda")
    weights = torch.randn(3, 6, 8, device="cuda")
    params = [x, h0, *f.parameters(), *b.parameters()]
    with ieee_float32():
        fast = functional.bigru(x, f.stored_weights(), b.stored_weights(), h0, mask)
        assert fast is not None, "bigru did not serve a prefix mask on CUDA"
        fast_grads = torch.autograd.grad((torch.cat(fast, -1) * weights).sum(), params)
        with gpu_paths(False):
            plain = biscan(f, b, f.input_proj(x), b.input_proj(x), h0, mask)
            plain_grads = torch.autograd.grad((torch.cat(plain, -1) * weights).sum(), params)
    for g, r in zip(fast, plain):
        _close(g, r, 1e-5, "states")
    for g, r in zip(fast_grads, plain_grads):
        _close(g, r, 1e-4, "gradients")


@needs_cuda
def test_model_with_the_gpu_paths_equals_the_plain_path():
    for overrides in ({}, {"encoder": "stacked-birnn"}, {"doc_init_enc": True}, {"encoder": "bcae"}):
        model = _model(**overrides)
        with ieee_float32():
            loss, grads = _loss_and_grads(model)
            with gpu_paths(False):
                plain_loss, plain_grads = _loss_and_grads(model)
        _close(loss, plain_loss, 1e-4, f"loss {overrides}")
        assert grads.keys() == plain_grads.keys()
        for name, g in grads.items():
            _close(g, plain_grads[name], 1e-4, f"{name} {overrides}")


@needs_cuda
def test_search_steps_with_the_gpu_paths_equal_the_plain_path():
    model = _model().eval()
    src, src_mask, _, _ = _batch()

    def log_probs():
        with torch.no_grad():
            enc = model.encode(src, src_mask)
            state, prev, out = model.init_state(enc), None, []
            for _ in range(4):
                logp, state, _ = model.step(enc, state, prev)
                prev = logp.argmax(-1)
                out.append(logp)
        return torch.stack(out)

    with ieee_float32():
        fast = log_probs()
        with gpu_paths(False):
            plain = log_probs()
    _close(fast, plain, 1e-5, "log-probabilities")


@needs_cuda
def test_bf16_stays_close_to_float32_and_keeps_float32_masters():
    model = _model()
    with ieee_float32():
        expected, grads32 = _loss_and_grads(model)
    for paths in (True, False):
        with gpu_paths(paths):
            loss, grads = _loss_and_grads(model, bf16=True)
        assert loss.dtype == torch.float32 and math.isfinite(float(loss))
        assert abs(float(loss) - float(expected)) <= 1e-2 * float(expected), (paths, float(loss), float(expected))
        assert all(g.dtype == torch.float32 for g in grads.values())
        full32 = torch.cat([g.flatten() for g in grads32.values()])
        full16 = torch.cat([grads[n].flatten() for n in grads32])
        assert (full16 - full32).norm() <= 3e-2 * full32.norm(), (paths, float((full16 - full32).norm()))


@needs_cuda
def test_bf16_casts_the_recurrent_matrices_once_per_forward_pass():
    model = _model()
    H, A = model.cfg.hidden_dim, model.cfg.att_dim

    def casts(length):
        src, src_mask = pad([[4 + i % 9 for i in range(length)]] * 3)
        tgt, tgt_mask = pad([[4 + i % 7 for i in range(length - 1)] + [EOS]] * 3)
        counter = WeightCasts({(H, 3 * H), (2, H, 3 * H), (H, A + 3 * H), (3 * H, H)})
        with counter, torch.autocast("cuda", dtype=torch.bfloat16):
            nll, _ = model.loss(src.cuda(), src_mask.cuda(), tgt.cuda(), tgt_mask.cuda())
        nll.backward()
        return counter.count

    short, long = casts(3), casts(9)
    assert short == long, (short, long)
    with gpu_paths(False):
        assert casts(9) > casts(3)


def _sentences(rows: int, length: int, offset: int) -> list[list[int]]:
    return [[4 + (offset + 3 * r + i) % 11 for i in range(length - r % 3)] for r in range(rows)]


@needs_cuda
def test_graphed_steps_equal_eager_steps():
    """training.cuda_graphs (ctxnmt.training.graphs): batches of two padded shapes, each shape
    replayed with other sentences and another scale, give the eager step's loss and gradients;
    a parameter's `.grad` set to None meanwhile is given its graph's tensor back."""
    from ctxnmt.data.batching import make_batch
    from ctxnmt.data.indexed import Side
    from ctxnmt.training.graphs import GraphedSteps

    model = _model(hidden_dim=20)
    graphs = GraphedSteps(model, 0.1, lambda: torch.autocast("cuda", enabled=False), log=print)
    cases = [(5, 7, 0, 0.5), (5, 7, 1, 0.25), (3, 21, 2, 1.0), (6, 20, 3, 0.5), (4, 9, 4, 1.0)]
    with ieee_float32():
        for rows, length, offset, scale in cases:
            src = _sentences(rows, length, offset)
            tgt = [s[::-1][: max(1, len(s) - 2)] + [EOS] for s in src]
            batch = make_batch(list(range(rows)), Side.from_lists(src), Side.from_lists(tgt))
            model.zero_grad(set_to_none=True)
            nll, _ = model.loss(*[x.cuda() for x in (batch.src, batch.src_mask, batch.tgt, batch.tgt_mask)], 0.1)
            (nll * scale).backward()
            nll = nll.detach()  # no autograd graph of the eager step may outlive it into a capture
            expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            graphs.zero_grad()
            got = graphs.forward_backward(batch, scale)
            torch.cuda.synchronize()
            _close(got, nll, 1e-4, f"loss of {rows}×{length}")
            for n, p in model.named_parameters():
                if n in expected:
                    _close(p.grad, expected[n], 1e-4, f"∂{n} of {rows}×{length}")
    assert graphs.captured == 2, graphs.graphs


@needs_cuda
def test_graphed_steps_under_bf16_stay_close_to_float32():
    from ctxnmt.data.batching import make_batch
    from ctxnmt.data.indexed import Side
    from ctxnmt.training.graphs import GraphedSteps

    model = _model(hidden_dim=20)
    src = _sentences(5, 8, 0)
    batch = make_batch(list(range(5)), Side.from_lists(src), Side.from_lists([s[:-1] + [EOS] for s in src]))
    losses = []
    for bf16 in (False, True):
        graphs = GraphedSteps(model, 0.0, lambda: torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16,
                                                                   cache_enabled=False))
        graphs.zero_grad()
        losses.append(float(graphs.forward_backward(batch, 1.0)))
        assert graphs.captured == 1
    assert abs(losses[1] - losses[0]) <= 0.01 * abs(losses[0]), losses


@needs_cuda
def test_graphed_search_finds_what_eager_search_finds():
    """decoding.cuda_graphs: beam 3 through CUDA graphs of the search step (several shapes as
    sentences leave) finds the eager search's hypotheses; under bf16 autocast it runs."""
    from tests.decoding.search import search_batch
    from ctxnmt.decoding.graphs import GraphedSearch
    from ctxnmt.decoding.length import LengthControl

    model = _model().eval()
    sources = _sentences(11, 9, 3)
    src, src_mask = (t.cuda() for t in pad(sources))
    length = LengthControl(kind="wu", alpha=0.6, beta=0.2, max_len_a=1.0, max_len_b=3)
    with ieee_float32():
        eager = search_batch(model, src, src_mask, beam=3, nbest=3, length=length)
        wrapped = GraphedSearch(model)
        graphed = search_batch(wrapped, src, src_mask, beam=3, nbest=3, length=length)
    assert wrapped.on and wrapped.captured >= 1
    assert [[h.tokens for h in hyps] for hyps in graphed] == [[h.tokens for h in hyps] for hyps in eager]
    for a, b in zip(graphed, eager):
        for x, y in zip(a, b):
            assert abs(x.score - y.score) <= 1e-4, (x.score, y.score)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        bf16 = search_batch(GraphedSearch(model), src, src_mask, beam=3, length=length)
    assert len(bf16) == len(sources) and all(hyps for hyps in bf16)


def main() -> int:
    """Every test_ function of this module; the number that failed as exit status."""
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to check")
        return 0
    print(f"bf16 in the fused CUDA GRU cell: {functional._cuda_cell_serves(torch.bfloat16)}")
    failed = 0
    for name, test in [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]:
        try:
            test()
            print(f"PASS {name}")
        except Exception as err:  # report every check, then fail
            failed += 1
            print(f"FAIL {name}: {type(err).__name__}: {err}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
