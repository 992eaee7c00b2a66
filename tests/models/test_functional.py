"""The speed-motivated autograd functions give the plain operations' values and gradients."""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from ctxnmt.models.functional import WordTable, linear_cross_entropy, mix, read_every_step, step_product


@pytest.mark.parametrize("rows_per_sentence", [1, 3])
def test_mix_matches_bmm_with_gradients(rows_per_sentence):
    torch.manual_seed(0)
    alpha = torch.softmax(torch.randn(4 * rows_per_sentence, 6), -1).double().requires_grad_()
    values = torch.randn(4, 6, 5, dtype=torch.double, requires_grad=True)
    torch.autograd.gradcheck(mix, (alpha, values))
    expected = torch.bmm(alpha.view(4, rows_per_sentence, 6), values).view(-1, 5)
    torch.testing.assert_close(mix(alpha, values), expected)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_chunked_linear_cross_entropy_matches_plain(smoothing):
    torch.manual_seed(1)
    x = torch.randn(37, 8, dtype=torch.double, requires_grad=True)
    w = torch.randn(11, 8, dtype=torch.double, requires_grad=True)
    b = torch.randn(11, dtype=torch.double, requires_grad=True)
    t = torch.randint(0, 11, (37,))
    fast = linear_cross_entropy(x, w, b, t, smoothing, chunk=10)
    plain = F.cross_entropy(F.linear(x, w, b), t, reduction="sum", label_smoothing=smoothing)
    torch.testing.assert_close(fast, plain)
    torch.autograd.gradcheck(lambda x, w, b: linear_cross_entropy(x, w, b, t, smoothing, 10), (x, w, b))
    # The gradient is formed in the forward pass; the backward pass must still scale it.
    (2.5 * linear_cross_entropy(x, w, b, t, smoothing, chunk=10)).backward()
    fast_grads = [p.grad.clone() for p in (x, w, b)]
    for p in (x, w, b):
        p.grad = None
    (2.5 * plain).backward()
    for fast_grad, p in zip(fast_grads, (x, w, b)):
        torch.testing.assert_close(fast_grad, p.grad)


def _steps_over(values, alphas):
    """A toy recurrence: each step mixes `values` with its α and feeds the next step's weights."""
    out, carry = [], torch.zeros(alphas[0].size(0), values.size(2), dtype=values.dtype)
    for a in alphas:
        weights = torch.softmax(a + carry[:, : a.size(1)], -1)
        carry = mix(weights, values) * 0.5 + carry
        out.append(carry)
    return torch.stack(out).sum() + (values ** 2).sum()  # values also used outside the steps


@pytest.mark.parametrize("rows_per_sentence", [1, 2])
def test_read_every_step_gives_the_summed_gradient_of_all_steps(rows_per_sentence):
    torch.manual_seed(4)
    values = torch.randn(3, 4, 5, dtype=torch.double, requires_grad=True)
    alphas = [torch.randn(3 * rows_per_sentence, 4, dtype=torch.double, requires_grad=True) for _ in range(6)]
    banked = _steps_over(read_every_step(values), alphas)
    banked_grads = torch.autograd.grad(banked, [values] + alphas, retain_graph=True)
    plain = _steps_over(values, alphas)
    torch.testing.assert_close(banked, plain)
    for a, b in zip(banked_grads, torch.autograd.grad(plain, [values] + alphas)):
        torch.testing.assert_close(a, b)
    # A second backward pass through the retained graph deposits and sums anew.
    for a, b in zip(torch.autograd.grad(banked, [values] + alphas), banked_grads):
        torch.testing.assert_close(a, b)
    torch.autograd.gradcheck(lambda v, *a: _steps_over(read_every_step(v), a), (values, *alphas))


def _recurrence(U, h0, inputs, product):
    """A toy tanh RNN h_t = tanh(x_t + h_{t-1} U), U also used once outside the steps."""
    h, total = h0, (U ** 2).sum()
    for x in inputs:
        h = torch.tanh(x + product(h, U))
        total = total + (h * torch.arange(h.size(-1), dtype=h.dtype)).sum()
    return total


@pytest.mark.parametrize("lead", [(), (2,)])  # one matrix (decoder), stacked directions (bmm, encoder)
def test_step_product_gives_autograds_gradient_for_a_banked_matrix(lead):
    torch.manual_seed(5)
    U = torch.randn(*lead, 4, 4, dtype=torch.double, requires_grad=True)
    h0 = torch.randn(*lead, 3, 4, dtype=torch.double, requires_grad=True)
    inputs = [torch.randn(*lead, 3, 4, dtype=torch.double, requires_grad=True) for _ in range(5)]
    wanted = [U, h0, *inputs]
    banked = _recurrence(read_every_step(U), h0, inputs, step_product)
    banked_grads = torch.autograd.grad(banked, wanted, retain_graph=True)
    plain = _recurrence(U, h0, inputs, torch.matmul)
    torch.testing.assert_close(banked, plain)
    for a, b in zip(banked_grads, torch.autograd.grad(plain, wanted)):
        torch.testing.assert_close(a, b)
    # A second backward pass through the retained graph deposits and sums anew.
    for a, b in zip(torch.autograd.grad(banked, wanted), banked_grads):
        torch.testing.assert_close(a, b)
    torch.autograd.gradcheck(lambda u, h, *x: _recurrence(read_every_step(u), h, x, step_product), tuple(wanted))


def test_step_product_without_a_bank_is_a_plain_product():
    h, U = torch.randn(3, 4, requires_grad=True), torch.randn(4, 6, requires_grad=True)
    out = step_product(h, U)
    assert out.grad_fn.name() == "MmBackward0"
    torch.testing.assert_close(out, h @ U)


def test_read_every_step_is_the_identity_outside_autograd():
    values = torch.randn(2, 3, 4)
    assert read_every_step(values) is values
    with torch.no_grad():
        leaf = values.clone().requires_grad_()
        assert read_every_step(leaf) is leaf


def test_additive_energy_matches_plain_with_gradients():
    from ctxnmt.models.functional import additive_energy

    torch.manual_seed(2)
    keys = torch.randn(3, 5, 4, dtype=torch.double, requires_grad=True)
    query = torch.randn(3, 2, 4, dtype=torch.double, requires_grad=True)
    v = torch.randn(4, dtype=torch.double, requires_grad=True)
    plain = torch.tanh(keys.unsqueeze(1) + query.unsqueeze(2)) @ v
    torch.testing.assert_close(additive_energy(keys, query, v), plain)
    torch.autograd.gradcheck(additive_energy, (keys, query, v))
    with torch.no_grad():
        torch.testing.assert_close(additive_energy(keys, query, v), plain)


def test_additive_energy_float32_close_to_tanh_including_gradients():
    """The sigmoid form rounds differently from torch.tanh, by a few 1e-8 per element in float32."""
    from ctxnmt.models.functional import additive_energy

    torch.manual_seed(3)
    leaves = [torch.randn(6, 9, 64) * 2, torch.randn(6, 1, 64) * 2, torch.randn(64) / 8]
    fast = [x.clone().requires_grad_() for x in leaves]
    plain = [x.clone().requires_grad_() for x in leaves]
    grad = torch.randn(6, 1, 9)
    e_fast = additive_energy(*fast)
    e_plain = torch.tanh(plain[0].unsqueeze(1) + plain[1].unsqueeze(2)) @ plain[2]
    torch.testing.assert_close(e_fast, e_plain, rtol=0, atol=2e-6)
    e_fast.backward(grad)
    e_plain.backward(grad)
    for a, b in zip(fast, plain):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=2e-6)


def test_model_gradients_equal_plain_autograd(monkeypatch):
    """The whole model's gradients with the custom functions equal plain autograd's."""
    import ctxnmt.models.attention as attention
    import ctxnmt.models.functional as functional
    from ctxnmt.data.batching import pad
    from tests.models.test_rnnsearch import SRC, TGT, small_model

    model = small_model().double()  # no dropout: small_model sets dropout_out=0
    src, src_mask = pad(SRC)
    tgt, tgt_mask = pad(TGT)

    def grads():
        model.zero_grad()
        model.loss(src, src_mask.double(), tgt, tgt_mask.double())[0].backward()
        return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    fast = grads()
    monkeypatch.setattr(functional, "_Mix", type("M", (), {"apply": staticmethod(
        lambda a, v: torch.bmm(a, v))}))
    monkeypatch.setattr(attention, "additive_energy",
                        lambda k, q, v, mask=None: torch.tanh(k.unsqueeze(1) + q.unsqueeze(2)) @ v)
    monkeypatch.setattr("ctxnmt.models.nmt.linear_cross_entropy",
                        lambda x, w, b, t, s: F.cross_entropy(F.linear(x, w, b), t, reduction="sum"))
    plain = grads()
    assert fast.keys() == plain.keys()
    for name in fast:
        torch.testing.assert_close(fast[name], plain[name], msg=name)


def test_the_word_table_is_formed_again_when_the_autocast_precision_changes():
    """A table formed in float32 must not serve a bfloat16 search (nor the other way round):
    each lookup equals f of the rows themselves under the precision in force."""
    torch.manual_seed(0)
    embeddings, layer = torch.randn(12, 8), torch.nn.Linear(8, 6)
    ids = torch.tensor([3, 7, 3])
    table = WordTable()
    with torch.no_grad():
        for autocast in (False, True, False):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                got = table.lookup(layer, embeddings, list(layer.parameters()), ids, embeddings[ids])
                expected = layer(embeddings[ids])
            assert got.dtype == expected.dtype and torch.equal(got, expected), autocast
