"""Target-side summaries d_t against literal per-step implementations of their
equations, incremental decoding against teacher forcing, and parameter growth."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.models.nmt import build_model, count_parameters
from tests.models import reference as ref
from tests.models.test_rnnsearch import SRC, TGT, assert_steps_match_teacher_forcing, batch_logprobs, small_model

SCORED = ["self-attentive", "self-attentive-sum", "self-attentive-product", "self-attentive-dot",
          "self-attentive-scope"]
SUMMARIES = ["previous", "mean", "mean-with-start"] + SCORED
DECODERS = ["cgru", "self-attentive-rnn", "memory-rnn"]


def literal_mean(t, prev, s, c):
    """Eq. 9 (self-attentive residual decoder paper): d_t = 1/(t−1) Σ_{i=1}^{t−1} E y_i.
    `prev` is [y_0, E y_1, …, E y_{t−1}]: at t = 1 (prev = [y_0]) the sum is empty and d_1 = y_0."""
    words = prev[1:]
    if not words:
        return prev[0]
    return sum(words) / len(words)


def literal_mean_with_start(t, prev, s, c):
    return torch.stack(prev).mean(0)  # ours: (1/t) Σ_{i=0}^{t−1} E y_i, y_0 counted as a word


def literal_scored(model, name):
    """d_t = Σ_i softmax_i(e_ti) E y_i, one word at a time: the extended paper's eqs. 10–13
    (the AAAI version's eqs. 12–14: `self-attentive` is its "simple" score, -sum, -product and
    -dot the others; content+scope is the extended paper's eq. 12).  The sums run over
    i = 0 … t−1, y_0 included: the papers' prose ("from y_0 to y_{t−1}") and the authors'
    released `cond_att_layer`, whose start slot is the zero y_0 (with `learned_start`, our
    learned y_0), where the equations' indices start at 1."""
    sa = model.decoder.summary

    def score(y, s, c):
        if name == "self-attentive":  # content: vᵀ tanh(W_y E y_i)
            return (sa.v.weight[0] * torch.tanh(sa.W_y.weight @ y + sa.W_y.bias)).sum()
        if name == "self-attentive-dot":  # (E y_i)ᵀ W_c c_t
            return y @ (sa.W_q.weight @ c)
        wy = sa.W_y.weight @ y + sa.W_y.bias
        if name == "self-attentive-sum":  # vᵀ tanh(W_y E y_i + W_c c_t)
            inner = wy + sa.W_q.weight @ c
        elif name == "self-attentive-product":  # vᵀ tanh(W_y E y_i ⊙ W_c c_t)
            inner = wy * (sa.W_q.weight @ c)
        else:  # content+scope: vᵀ tanh(W_y E y_i + W_s s_t)
            inner = wy + sa.W_q.weight @ s
        return (sa.v.weight[0] * torch.tanh(inner)).sum()

    def summary(t, prev, s, c):
        alpha = torch.softmax(torch.stack([score(y, s, c) for y in prev]), 0)
        return sum(a * y for a, y in zip(alpha, prev))

    return summary


LITERAL = {"mean": literal_mean, "mean-with-start": literal_mean_with_start}


@pytest.mark.parametrize("name", ["mean", "mean-with-start"] + SCORED)
def test_summary_matches_literal_equation(name):
    model = small_model(target_context=name, learned_start=True)
    summary = LITERAL[name] if name in LITERAL else literal_scored(model, name)
    logp, _ = batch_logprobs(model, SRC, TGT)
    for b, (s, t) in enumerate(zip(SRC, TGT)):
        ref_logp, _ = ref.rnnsearch_logprobs(model, s, t, summary)
        torch.testing.assert_close(logp[b, : len(t)], ref_logp, atol=1e-5, rtol=0)


def test_mean_is_eq_9_not_the_start_inclusive_mean():
    """Eq. 9 on three words: d_2 = E y_1, d_3 = (E y_1 + E y_2)/2, with y_0 left out even when
    it is not zero; the start-inclusive form would give (y_0 + E y_1)/2 at t = 2."""
    model = small_model(target_context="mean")
    y0, y1, y2 = torch.full((4,), 10.0), torch.tensor([1.0, 2, 3, 4]), torch.tensor([3.0, 0, 1, 2])
    d = model.decoder.summary.full(torch.stack([y0, y1, y2]).unsqueeze(0), torch.ones(1, 3))[0]
    torch.testing.assert_close(d, torch.stack([y0, y1, (y1 + y2) / 2]))


def test_first_summary_is_the_start_vector():
    model = small_model(target_context="self-attentive")
    prev = torch.randn(2, 5, 8)
    prev[:, 0] = 0.0
    d = model.decoder.summary.full(prev, torch.ones(2, 5))
    assert float(d[:, 0].detach().abs().max()) == 0.0


def test_content_summary_is_stable_for_extreme_scores():
    model = small_model(target_context="self-attentive")
    sa = model.decoder.summary
    with torch.no_grad():
        sa.v.weight.fill_(200.0)  # scores span about ±1600: exp() alone would overflow
    prev = torch.randn(1, 40, 8)
    d = sa.full(prev, torch.ones(1, 40))
    assert torch.isfinite(d).all()
    e = sa.scores(prev)[0]
    for t in (0, 17, 39):  # the literal softmax agrees
        alpha = torch.softmax(e[: t + 1], 0)
        torch.testing.assert_close(d[0, t], (alpha.unsqueeze(1) * prev[0, : t + 1]).sum(0), atol=1e-4, rtol=1e-4)


# Model variants that change what the decoder computes per step: each must keep incremental
# decoding equal to teacher forcing and beam reordering consistent, with every summary.
VARIANTS = {"plain": {}, "adaptive-output": {"output": "adaptive"}, "adaptive-gru": {"cell": "adaptive-gru"},
            "adaptive-gru-released": {"cell": "adaptive-gru-released"},
            "adaptive-both": {"cell": "adaptive-gru", "output": "adaptive", "encoder": "bcae"}}
CASES = [(name, variant) for variant in ("plain", "adaptive-output") for name in SUMMARIES] + [
    (name, variant) for variant in ("adaptive-gru", "adaptive-gru-released", "adaptive-both")
    for name in ("previous", "self-attentive-scope")]


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("name, variant", CASES)
def test_incremental_decoding_matches_teacher_forcing(name, variant, decoder):
    model = small_model(target_context=name, decoder=decoder, **VARIANTS[variant])
    logp_full, _ = batch_logprobs(model, SRC, TGT)
    assert_steps_match_teacher_forcing(model, logp_full)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("name, variant", CASES)
def test_beam_reorder_keeps_states_consistent(name, variant, decoder):
    """Reordered rows continue exactly as the rows they were copied from."""

    model = small_model(target_context=name, decoder=decoder, **VARIANTS[variant])
    src, src_mask = pad(SRC)
    tgt, _ = pad(TGT)
    perm = torch.tensor([1, 2, 0])
    with torch.no_grad():
        enc = model.encode(src, src_mask)
        state = model.init_state(enc)
        _, state, _ = model.step(enc, state, None)
        _, state, _ = model.step(enc, state, tgt[:, 0])
        logp_ref, _, _ = model.step(enc, state, tgt[:, 1])
        logp_perm, _, _ = model.step(enc.select(perm), state.select(perm), tgt[perm, 1])
    torch.testing.assert_close(logp_perm, logp_ref[perm], atol=1e-6, rtol=0)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("name, variant", CASES)
def test_a_forced_step_reaches_the_state_a_whole_step_does(name, variant, decoder):
    """`forced_step` (a 2-to-2 prefix's words) skips the readout, and c_t where the summary does not
    read it; every state entry it leaves must be what `step` leaves, step after step.  Two rows
    a sentence, as in search: GRU_2's input terms then come per annotation and c_t only for the
    readout, the case where a forced step forms no c_t."""
    model = small_model(target_context=name, decoder=decoder, **VARIANTS[variant])
    src, src_mask = pad(SRC)
    tgt, _ = pad(TGT)
    with torch.no_grad():
        enc = model.encode(src, src_mask, None, 2)
        whole = forced = model.init_state(enc, 2)
        start = model.start.expand(whole.batch_size(), -1)
        for t in range(3):
            emb = start if t == 0 else model.tgt_emb(tgt[:, t - 1].repeat_interleave(2))
            xp = model.decoder.word_input(emb)
            _, whole, _ = model.decoder.step(enc, whole, emb, xp)
            forced = model.decoder.forced_step(enc, forced, emb, xp)
            assert whole.fits(forced)
            for key in whole:
                assert torch.equal(whole[key], forced[key]), key
            for part in whole.parts:
                for key in whole.part(part):
                    assert torch.equal(whole.part(part)[key], forced.part(part)[key]), (part, key)


def test_parameter_growth_is_W_y_and_v_only():
    e, h, c = 8, 10, 20  # embeddings, decoder state, context vector (2 × encoder hidden)
    counts = {name: count_parameters(build_model(ModelConfig.of(emb_dim=e, hidden_dim=h, att_dim=9,
                                                             target_context=name), 16, 16))
              for name in SUMMARIES}
    growth = {name: n - counts["previous"] for name, n in counts.items()}
    assert growth["mean"] == 0
    assert growth["self-attentive"] == e * e + e + e  # W_y, v (the papers' e² + e) and W_y's bias (the released code's)
    assert growth["self-attentive-sum"] == growth["self-attentive-product"] == e * e + e + e + c * e  # + W_c
    assert growth["self-attentive-dot"] == c * e  # W_c only
    assert growth["self-attentive-scope"] == e * e + e + e + h * e  # + W_s
