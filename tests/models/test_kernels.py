"""The fused CPU kernels (ctxnmt/models/kernels.cpp) against the literal equations in float64.

The kernels must build wherever the tests run (CI included): a failed build fails
these tests instead of silently testing the PyTorch fallback.  CTXNMT_KERNELS=0
switches them off and skips this file.
"""
from __future__ import annotations

import math
import os

import pytest
import torch

from ctxnmt.models import kernels
from ctxnmt.models.cells import GRUCell, hold_on_padding
from ctxnmt.models.functional import additive_energy, gru_gates, read_every_step

pytestmark = pytest.mark.skipif(os.environ.get("CTXNMT_KERNELS") == "0", reason="fused kernels switched off")


@pytest.fixture(autouse=True, scope="module")
def built():
    assert kernels.available(), "the fused CPU kernels did not build (see the warning above)"


def _leaves(*tensors):
    return [t.clone().requires_grad_() for t in tensors]


def _energy_reference(keys, query, v):
    """e[n, k, s] = Σ_a v_a tanh(keys[n, s, a] + query[n, k, a]), literally."""
    return torch.tanh(keys.unsqueeze(1) + query.unsqueeze(2)) @ v


@pytest.mark.parametrize("rows_per_sentence", [1, 3])
def test_energy_kernel_matches_the_equation_with_gradients(rows_per_sentence):
    torch.manual_seed(0)
    N, K, S, A = 5, rows_per_sentence, 7, 67  # A not a multiple of the vector width
    keys, query, v = torch.randn(N, S, A) * 2, torch.randn(N, K, A) * 2, torch.randn(A) / 4
    grad = torch.randn(N, K, S)
    grad[:, :, -2:] = 0.0  # masked source padding gets no gradient from the softmax
    fused = _leaves(keys, query, v)
    plain = _leaves(keys.double(), query.double(), v.double())
    e_fused = additive_energy(*fused)
    e_plain = _energy_reference(*plain)
    torch.testing.assert_close(e_fused, e_plain.float(), rtol=0, atol=1e-5)
    e_fused.backward(grad)
    e_plain.backward(grad.double())
    for a, b in zip(fused, plain):
        torch.testing.assert_close(a.grad, b.grad.float(), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(additive_energy(keys, query, v), e_fused.detach())


def test_energy_kernel_leaves_masked_positions_uncomputed_and_the_rest_to_the_bit():
    """With the source mask, the positions it masks (padding, which attention masks out) are 0,
    and every other position is what the kernel computes without a mask, bit for bit."""
    torch.manual_seed(2)
    N, K, S, A = 4, 3, 9, 67
    keys, query, v = torch.randn(N, S, A), torch.randn(N, K, A), torch.randn(A)
    mask = torch.ones(N, S)
    mask[0, 5:] = 0.0  # padding after a short sentence
    mask[2, 3:6] = 0.0  # padding between a concatenation's sentence and its context
    whole = torch.ops.ctxnmt.additive_energy(keys, query, v)
    skipped = additive_energy(keys, query, v, mask)
    kept = mask.bool().unsqueeze(1).expand(N, K, S)
    assert torch.equal(skipped[kept], whole[kept])
    assert (skipped[~kept] == 0).all()
    with pytest.raises(RuntimeError, match="mask's shape"):
        torch.ops.ctxnmt.additive_energy(keys, query, v, torch.ones(N * K, S))
    # in training too: masked positions get no gradient, so skipping them changes no gradient
    grads = []
    for given in (None, mask):
        leaves = _leaves(keys, query, v)
        energy = additive_energy(*leaves, given).masked_fill(~kept, float("-inf"))
        torch.softmax(energy, -1).square().sum().backward()
        grads.append([x.grad for x in leaves])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_energy_kernel_sums_the_keys_gradient_of_every_step():
    """Keys read at every decoder step take one running sum (read_every_step), also
    when they are used outside the steps and when the graph is walked twice."""
    torch.manual_seed(1)
    keys, v = torch.randn(3, 6, 16), torch.randn(16)
    queries = [torch.randn(3, 1, 16) for _ in range(4)]

    def loss(keys, v, queries, shared):
        total = (keys ** 2).sum()
        carry = torch.zeros(3, 1, 16, dtype=keys.dtype)
        for q in queries:
            e = additive_energy(shared, q + carry, v)
            carry = carry + torch.softmax(e, -1) @ keys[:, :, :16] * 0.1
            total = total + (e * torch.arange(6, dtype=keys.dtype)).sum()
        return total

    fused = _leaves(keys, v, *queries)
    plain = _leaves(keys.double(), v.double(), *[q.double() for q in queries])
    out = loss(fused[0], fused[1], fused[2:], read_every_step(fused[0]))
    first = torch.autograd.grad(out, fused, retain_graph=True)
    second = torch.autograd.grad(out, fused)
    expected = torch.autograd.grad(loss(plain[0], plain[1], plain[2:], plain[0]), plain)
    for a, b, c in zip(first, second, expected):
        torch.testing.assert_close(a, c.float(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(b, a)


def _gru_reference(xp, hp, h, mask=None):
    """The dl4mt GRU with the state held on padding, as PyTorch operations."""
    new = GRUCell.reference_combine(xp, hp, h)
    return new if mask is None else hold_on_padding(new, h, mask)


@pytest.mark.parametrize("masked", [False, True])
def test_gru_kernel_matches_the_equations_with_gradients(masked):
    torch.manual_seed(2)
    B, H = 6, 37
    xp, hp, h = torch.randn(B, 3 * H) * 2, torch.randn(B, 3 * H) * 2, torch.randn(B, H)
    mask = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0]) if masked else None
    grad = torch.randn(B, H)
    fused = _leaves(xp, hp, h)
    plain = _leaves(xp.double(), hp.double(), h.double())
    out = gru_gates(*fused, mask)
    expected = _gru_reference(*plain, None if mask is None else mask.double())
    torch.testing.assert_close(out, expected.float(), rtol=0, atol=1e-6)
    if masked:
        assert torch.equal(out[2], h[2]) and torch.equal(out[4], h[4])
    out.backward(grad)
    expected.backward(grad.double())
    for a, b in zip(fused, plain):
        torch.testing.assert_close(a.grad, b.grad.float(), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(gru_gates(xp, hp, h, mask), out.detach())


def test_gru_kernel_reads_strided_rows_as_the_encoders_pass_them():
    """biscan hands (2, B, 3H) slices of a (2, B, T, 3H) tensor and a (2, B) mask slice."""
    torch.manual_seed(3)
    H, T = 8, 5
    xp_all = torch.randn(2, 4, T, 3 * H, requires_grad=True)
    hp_all = torch.randn(2, 4, 3 * H + 5, requires_grad=True)  # a wider product, sliced
    h = torch.randn(2, 4, H, requires_grad=True)
    mask_all = (torch.rand(2, 4, T) > 0.3).float()
    xp, hp, m = xp_all[:, :, 2], hp_all[..., 5:], mask_all[:, :, 2]
    out = gru_gates(xp, hp, h, m)
    expected = _gru_reference(xp, hp, h, m)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    grads = torch.autograd.grad(out.square().sum(), [xp_all, hp_all, h])
    for a, b in zip(grads, torch.autograd.grad(expected.square().sum(), [xp_all, hp_all, h])):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_kernels_refuse_what_they_cannot_serve():
    with pytest.raises(RuntimeError, match="float32 CPU"):
        torch.ops.ctxnmt.additive_energy(torch.zeros(2, 3, 4, dtype=torch.float64), torch.zeros(2, 1, 4),
                                         torch.zeros(4))
    with pytest.raises(RuntimeError, match="xp must be"):
        torch.ops.ctxnmt.gru_gates(torch.zeros(2, 5), torch.zeros(2, 6), torch.zeros(2, 2), None, False)
    # float64 (gradcheck) takes the PyTorch path instead of the kernel
    xp, h = torch.randn(2, 6, dtype=torch.float64), torch.randn(2, 2, dtype=torch.float64)
    assert torch.equal(gru_gates(xp, xp, h), _gru_reference(xp, xp, h))


def test_switched_off_kernels_leave_the_pytorch_path(monkeypatch):
    monkeypatch.setenv("CTXNMT_KERNELS", "0")
    assert kernels._load() is False


@pytest.mark.parametrize("use_packed", [True, False])  # the packed product into the row kernel, or the
@pytest.mark.parametrize("rows,k", [(16, 1), (33, 4), (40, 10)])  # vocabulary-major product into the column kernel
def test_top_log_softmax_kernel_matches_log_softmax_then_topk(rows, k, use_packed, monkeypatch):
    from ctxnmt.models import packed
    from ctxnmt.models.functional import top_log_softmax

    monkeypatch.setattr(packed, "AVAILABLE", packed.AVAILABLE and use_packed)

    torch.manual_seed(4)
    x, weight, bias = torch.randn(rows, 24), torch.randn(101, 24), torch.randn(101)
    def plain(x):  # what top_log_softmax runs where the kernel declines
        return torch.log_softmax(x @ weight.t() + bias, dim=-1).topk(k, dim=-1)

    with torch.no_grad():  # search runs without autograd; with it, the kernel declines
        values, ids = top_log_softmax(x, weight, bias, k)
        few_values, few_ids = top_log_softmax(x[:15], weight, bias, k)  # too few rows for a column task
        assert torch.equal(few_ids, plain(x[:15]).indices)
        torch.testing.assert_close(few_values, plain(x[:15]).values)
    with_grad = top_log_softmax(x, weight, bias, k)
    assert torch.equal(with_grad.indices, plain(x).indices)
    torch.testing.assert_close(with_grad.values, plain(x).values)
    expected = torch.log_softmax(x.double() @ weight.double().t() + bias.double(), dim=-1)
    ref_values, ref_ids = expected.topk(k, dim=-1)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(values, ref_values.float(), rtol=2e-6, atol=2e-6)  # float32 logits of size ~10


@pytest.mark.parametrize("rows", [15, 33])
def test_top_log_softmax_and_a_words_entry_whatever_its_rank(rows):
    """What a length-ratio prior's step reads: the top k of log softmax(x Wᵀ + b) and one
    word's entry, log softmax(·)_w = (x Wᵀ + b)_w − log Σ_v exp((x Wᵀ + b)_v), by the kernel's
    log Z from 16 rows on and by the plain operations below, in float64 to float32's rounding."""
    from ctxnmt.models.functional import top_log_softmax_and_word

    torch.manual_seed(8)
    x, weight, bias = torch.randn(rows, 24), torch.randn(101, 24), torch.randn(101)
    bias[2] = -30.0  # never among the top k
    with torch.no_grad():
        values, ids, word = top_log_softmax_and_word(x, weight, bias, 4, 2)
    expected = torch.log_softmax(x.double() @ weight.double().t() + bias.double(), dim=-1)
    ref_values, ref_ids = expected.topk(4, dim=-1)
    assert torch.equal(ids, ref_ids) and not (ids == 2).any()
    torch.testing.assert_close(values, ref_values.float(), rtol=2e-6, atol=2e-6)
    torch.testing.assert_close(word, expected[:, 2].float(), rtol=2e-6, atol=1e-5)


def test_top_log_softmax_kernel_keeps_the_earlier_word_of_a_tie():
    logits_t = torch.zeros(6, 16)  # (V, R): every word equally likely
    logits_t[4] = 1.0
    values, ids, log_z = torch.ops.ctxnmt.log_softmax_topk(logits_t, torch.zeros(6), 3)
    assert ids.tolist() == [[4, 0, 1]] * 16
    torch.testing.assert_close(log_z, torch.full((16,), math.log(5 + math.e)))
    torch.testing.assert_close(values.exp().sum(1) + 3 * values[:, 1].exp(), torch.ones(16))
    with pytest.raises(RuntimeError, match="k must be"):
        torch.ops.ctxnmt.log_softmax_topk(logits_t, torch.zeros(6), 7)


@pytest.mark.parametrize("rows,k", [(1, 1), (5, 4), (40, 10)])
def test_row_major_top_log_softmax_kernel_matches_log_softmax_then_topk(rows, k):
    """The kernel for row-major logits (an int8 product's): log softmax(l + b) of each row, its
    k largest entries best first, and each row's log Z = log Σ_v exp(l_v + b_v), in float64 to
    float32's rounding."""
    torch.manual_seed(5)
    logits, bias = torch.randn(rows, 101) * 4, torch.randn(101)
    values, ids, log_z = torch.ops.ctxnmt.row_log_softmax_topk(logits, bias, k)
    ref_values, ref_ids = torch.log_softmax(logits.double() + bias.double(), dim=-1).topk(k, dim=-1)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(values, ref_values.float(), rtol=2e-6, atol=2e-6)
    ref_log_z = torch.logsumexp(logits.double() + bias.double(), dim=-1)
    torch.testing.assert_close(log_z, ref_log_z.float(), rtol=2e-6, atol=2e-6)


def test_row_major_kernel_keeps_the_earlier_word_of_a_tie():
    logits = torch.zeros(16, 6)  # (R, V): every word equally likely
    logits[:, 4] = 1.0
    values, ids, log_z = torch.ops.ctxnmt.row_log_softmax_topk(logits, torch.zeros(6), 3)
    assert ids.tolist() == [[4, 0, 1]] * 16
    torch.testing.assert_close(log_z, torch.full((16,), math.log(5 + math.e)))
    torch.testing.assert_close(values.exp().sum(1) + 3 * values[:, 1].exp(), torch.ones(16))
    with pytest.raises(RuntimeError, match="k must be"):
        torch.ops.ctxnmt.row_log_softmax_topk(logits, torch.zeros(6), 7)
    with pytest.raises(RuntimeError, match="bias must be"):
        torch.ops.ctxnmt.row_log_softmax_topk(logits, torch.zeros(5), 2)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_softmax_xent_kernel_matches_the_loss_and_its_gradient(smoothing):
    """Per column of vocabulary-major logits: the label-smoothed cross-entropy, and the
    logits overwritten with its gradient; logits up to ±60 test the max-shift."""
    torch.manual_seed(6)
    V, R = 101, 37  # R not a multiple of the 16-column block
    logits_t = torch.randn(V, R) * 20
    logits_t[:, 3] += 40.0
    target = torch.randint(0, V, (R,))
    target[:2] = torch.tensor([0, V - 1])
    leaf = logits_t.double().t().clone().requires_grad_()
    loss_ref = torch.nn.functional.cross_entropy(leaf, target, reduction="none", label_smoothing=smoothing)
    loss_ref.sum().backward()
    bias = torch.randn(V) * 5  # added by the kernel as it reads
    g_t = logits_t - bias.unsqueeze(1)
    loss = torch.ops.ctxnmt.softmax_xent_columns(g_t, bias, target, smoothing)
    torch.testing.assert_close(loss, loss_ref.detach().float(), rtol=1e-5, atol=2e-5)
    # log Z of logits near 60 is exact to ~4e-6 in float32, so probabilities near 1 carry that relative error
    torch.testing.assert_close(g_t, leaf.grad.t().float(), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="target out of range"):
        torch.ops.ctxnmt.softmax_xent_columns(logits_t.clone(), bias, torch.full((R,), V), smoothing)


def test_linear_cross_entropy_through_the_kernel_matches_the_pytorch_path(monkeypatch):
    from ctxnmt.models import functional

    torch.manual_seed(7)
    x, weight, bias = torch.randn(45, 16), torch.randn(53, 16), torch.randn(53)
    target = torch.randint(0, 53, (45,))
    results = []
    for fusable in (functional._fusable, lambda *tensors: False):
        monkeypatch.setattr(functional, "_fusable", fusable)
        leaves = _leaves(x, weight, bias)
        loss = functional.linear_cross_entropy(*leaves, target, 0.1, chunk=20)
        results.append([loss.detach(), *torch.autograd.grad(2.0 * loss, leaves)])
    for fused, plain in zip(*results):
        torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)


def test_the_library_is_keyed_on_the_cpus_instruction_set(monkeypatch):
    """-march=native binaries crash on a CPU without one of their instructions: a cache
    shared across machines must give each instruction set its own library."""
    monkeypatch.setattr(kernels, "_cpu_flags", lambda: "avx2 fma sse4_2")
    path = kernels.library_path()
    monkeypatch.setattr(kernels, "_cpu_flags", lambda: "avx2 avx512f fma sse4_2")
    assert kernels.library_path() != path and kernels.library_path().parent == path.parent


def test_a_build_leaves_path_alone_and_a_failed_one_falls_back(tmp_path):
    """The build runs in a child process (whose PATH gains the venv's bin for ninja); this
    process's PATH stays as it was, and a build that fails leaves no library behind."""
    import subprocess
    import sys

    script = ("import os; before = os.environ['PATH']; from ctxnmt.models import kernels; "
              "print(kernels.available(), os.environ['PATH'] == before)")
    env = {**os.environ, "CTXNMT_KERNEL_CACHE": str(tmp_path), "CXX": "/bin/false", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["False", "True"], done.stderr
    assert "fused CPU kernels unavailable, using plain PyTorch" in done.stderr
    assert not list(tmp_path.rglob("*.so"))
