"""Adaptive weighting: the hyper-gated GRU cells and the adaptive output state against
their literal equations, alone and inside the whole model; parameter growth."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.config import ModelConfig
from ctxnmt.models.cells import (
    AdaptiveGRUCell,
    BalancedAdaptiveGRUCell,
    GRUCell,
    ScaledAdaptiveGRUCell,
    ScaledCandidateAdaptiveGRUCell,
    scan,
)
from ctxnmt.models.nmt import build_model, count_parameters
from ctxnmt.models.output import AdaptiveOutput, DeepOutput, Gain3AdaptiveOutput
from tests.models import reference as ref
from tests.models.test_rnnsearch import SRC, TGT, batch_logprobs, small_model
from tests.models.test_target_context import literal_mean, literal_scored


@pytest.mark.parametrize("cls, scaled", [(AdaptiveGRUCell, False), (ScaledCandidateAdaptiveGRUCell, True),
                                         (ScaledAdaptiveGRUCell, False), (BalancedAdaptiveGRUCell, False)])
def test_adaptive_cell_matches_reference(cls, scaled):
    torch.manual_seed(1)
    cell = cls(6, 5)
    x, h = torch.randn(6), torch.randn(5)
    with torch.no_grad():
        fast = cell.step(cell.input_proj(x.unsqueeze(0)), h.unsqueeze(0))[0]
        gain = 2.0 if cls is ScaledAdaptiveGRUCell else 1.0
        open_gate = 0.8 if cls is BalancedAdaptiveGRUCell else None
        expected = ref.adaptive_gru_step(cell, x, h, scaled_candidate=scaled, gain=gain, open_gate=open_gate)
        torch.testing.assert_close(fast, expected, atol=1e-6,
                                   rtol=0)


def test_hyper_gate_extremes():
    """g → 0: the state is ignored (h' = (1 − z) tanh(W x) with z = σ(W_z x));
    g → 1: the input is ignored inside every gate."""
    torch.manual_seed(2)
    cell = AdaptiveGRUCell(4, 3)
    x, h = torch.randn(1, 4), torch.randn(1, 3)
    with torch.no_grad():
        cell.W.bias[9:].fill_(-50.0)  # g ≈ 0
        xp = cell.input_proj(x)
        x_r, x_z, x_h, _ = xp.chunk(4, -1)
        z = torch.sigmoid(x_z)
        torch.testing.assert_close(cell.step(xp, h), (1 - z) * torch.tanh(x_h), atol=1e-6, rtol=0)
        cell.W.bias[9:].fill_(50.0)  # g ≈ 1
        xp = cell.input_proj(x)
        hp = h @ cell.hidden_weight()
        h_r, h_z, h_h, _ = hp.chunk(4, -1)
        r, z = torch.sigmoid(h_r), torch.sigmoid(h_z)
        candidate = torch.tanh(r * h_h)
        torch.testing.assert_close(cell.step(xp, h), z * h + (1 - z) * candidate, atol=1e-6, rtol=0)


def test_adaptive_scan_holds_state_on_padding():
    torch.manual_seed(3)
    cell = AdaptiveGRUCell(4, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    with torch.no_grad():
        states = scan(cell, cell.input_proj(torch.randn(1, 4, 4)), torch.randn(1, 3), mask)
    torch.testing.assert_close(states[0, 2], states[0, 1], atol=0, rtol=0)  # held, not decayed by g
    torch.testing.assert_close(states[0, 3], states[0, 1], atol=0, rtol=0)


def test_released_variant_changes_only_the_second_transition():
    model = small_model(cell="adaptive-gru-released", encoder="bcae")
    dec, enc = model.decoder, model.encoder
    assert type(dec.gru2) is ScaledCandidateAdaptiveGRUCell
    assert all(type(c).__name__ == "ReleasedAdaptiveGRUCell" for c in (dec.gru1, enc.future, enc.lower, enc.upper))


@pytest.mark.parametrize("overrides", [
    {"cell": "adaptive-gru"},
    {"cell": "adaptive-gru-released"},
    {"cell": "adaptive-gru-scaled"},
    {"cell": "gru", "encoder_cell": "adaptive-gru"},
    {"output": "adaptive"},
    {"output": "adaptive-gain3"},
    {"output": "adaptive", "decoder": "self-attentive-rnn"},
    {"output": "adaptive", "cell": "adaptive-gru", "encoder": "fcae", "learned_start": True},
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_whole_model_matches_reference(overrides):
    model = small_model(**overrides)
    logp, alpha = batch_logprobs(model, SRC, TGT)
    for b, (s, t) in enumerate(zip(SRC, TGT)):
        ref_logp, ref_alpha = ref.rnnsearch_logprobs(model, s, t)
        torch.testing.assert_close(logp[b, : len(t)], ref_logp, atol=1e-5, rtol=0)
        torch.testing.assert_close(alpha[b, : len(t), : len(s)], ref_alpha, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["mean", "self-attentive", "self-attentive-scope"])
def test_adaptive_output_composes_with_target_contexts(name):
    model = small_model(output="adaptive", target_context=name, learned_start=True)
    summary = literal_mean if name == "mean" else literal_scored(model, name)
    logp, _ = batch_logprobs(model, SRC, TGT)
    for b, (s, t) in enumerate(zip(SRC, TGT)):
        ref_logp, _ = ref.rnnsearch_logprobs(model, s, t, summary)
        torch.testing.assert_close(logp[b, : len(t)], ref_logp, atol=1e-5, rtol=0)


def test_adaptive_weights_are_a_per_dimension_distribution():
    out = small_model(output="adaptive").decoder.output
    s, d, c = torch.randn(5, 10), torch.randn(5, 8), torch.randn(5, 20)
    with torch.no_grad():
        alpha = out.weights(s, d, c)
    assert alpha.shape == (3, 5, out.out_dim)
    torch.testing.assert_close(alpha.sum(0), torch.ones(5, out.out_dim))
    assert float(alpha.std(-1).mean()) > 0  # the weights differ between dimensions


def test_uniform_adaptive_weights_give_the_deep_output():
    """With every score e_k equal (W_p = 0, so α_k = 1/3 in every dimension) the published
    adaptive output (eq. 18, weights summing to one) gives a third of the deep output's
    pre-activation; our adaptive-gain3 (K = 3) gives exactly the deep output."""
    torch.manual_seed(0)
    deep = DeepOutput(10, 8, 20, 12)
    s, d, c = torch.randn(5, 10), torch.randn(5, 8), torch.randn(5, 20)
    for cls, scale in ((AdaptiveOutput, 1 / 3), (Gain3AdaptiveOutput, 1.0)):
        out = cls(10, 8, 20, 12)
        out.load_state_dict(deep.state_dict(), strict=False)
        with torch.no_grad():
            out.W_p.weight.zero_()
            expected = torch.tanh(scale * torch.atanh(deep(s, d, c)))
            torch.testing.assert_close(out(s, d, c), expected, atol=1e-5, rtol=0)


def test_half_open_hyper_gates_give_the_plain_gru_with_the_gain():
    """With g = 1/2 everywhere (W_g, U_g and b_g zero) the scaled cell's gates and candidate
    are exactly the plain GRU's; the published cell's are at half their pre-activation."""
    torch.manual_seed(0)
    plain = GRUCell(4, 3)
    x, h = torch.randn(5, 4), torch.randn(5, 3)
    for cls in (ScaledAdaptiveGRUCell, AdaptiveGRUCell):
        cell = cls(4, 3)
        with torch.no_grad():
            cell.W.weight.copy_(torch.cat([plain.W.weight, torch.zeros(3, 4)]))
            cell.W.bias.copy_(torch.cat([plain.W.bias, torch.zeros(3)]))
            cell.U.weight.copy_(torch.cat([plain.U.weight, torch.zeros(3, 3)]))
            g, r, z, _, _ = cell._gates(cell.input_proj(x), h @ cell.hidden_weight())
            xr, xz, _ = plain.input_proj(x).chunk(3, -1)
            hr, hz, _ = (h @ plain.hidden_weight()).chunk(3, -1)
        half = cls is AdaptiveGRUCell
        torch.testing.assert_close(g, torch.full_like(g, 0.5))
        torch.testing.assert_close(r, torch.sigmoid((xr + hr) / (2 if half else 1)))
        torch.testing.assert_close(z, torch.sigmoid((xz + hz) / (2 if half else 1)))


def test_balanced_cell_starts_open_and_is_the_plain_gru_there():
    """adaptive-gru-balanced: after the model's initialisation every hyper-gate bias is
    logit 0.8, so with W_g, U_g zero g = 0.8; there r, z and h̃ are the plain GRU's, and the
    carried state is 0.8 ⊙ z ⊙ h."""
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(emb_dim=4, hidden_dim=3, att_dim=3, out_dim=4, cell="adaptive-gru-balanced"), 9, 9)
    cells = [m for m in model.modules() if isinstance(m, BalancedAdaptiveGRUCell)]
    assert len(cells) >= 4  # both encoder directions and both decoder transitions
    for cell in cells:
        torch.testing.assert_close(torch.sigmoid(cell.W.bias[9:]), torch.full((3,), 0.8))
    cell, plain = cells[0], GRUCell(4, 3)
    x, h = torch.randn(5, 4), torch.randn(5, 3)
    with torch.no_grad():
        cell.W.weight.copy_(torch.cat([plain.W.weight, torch.zeros(3, 4)]))
        cell.W.bias[:9].copy_(plain.W.bias)
        cell.U.weight.copy_(torch.cat([plain.U.weight, torch.zeros(3, 3)]))
        xp = cell.input_proj(x)
        xr, xz, xh = plain.input_proj(x).chunk(3, -1)
        hr, hz, hh = (h @ plain.hidden_weight()).chunk(3, -1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        candidate = torch.tanh(xh + r * hh)
        torch.testing.assert_close(cell.step(xp, h), 0.8 * z * h + (1 - z) * candidate)


def test_parameter_growth():
    e, h, a, o, v = 8, 10, 9, 12, 16
    c = 2 * h

    def count(**kw):
        return count_parameters(build_model(ModelConfig.of(emb_dim=e, hidden_dim=h, att_dim=a, out_dim=o, **kw), v, v))

    base = count()
    hyper = lambda n_in: (n_in + h) * h + h  # W_g, U_g, b_g  # noqa: E731
    assert count(encoder_cell="adaptive-gru") - base == 2 * hyper(e)
    assert count(cell="adaptive-gru") - base == 2 * hyper(e) + hyper(e) + hyper(c)
    assert count(cell="adaptive-gru-released") == count(cell="adaptive-gru")
    # M_s, M_y, M_c with biases, then W_m, W_r (+ b_r), W_p: all out_dim square
    assert count(output="adaptive") - base == (h + e + c) * o + 3 * o + 3 * o * o + o
