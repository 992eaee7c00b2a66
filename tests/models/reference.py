"""Slow, literal implementations of the papers' equations, one sentence and one
time step at a time, written from the equations rather than from the fast code.
They read the fast model's parameters so the two can be compared number for number."""
from __future__ import annotations

import torch


def sigmoid(x):
    return 1.0 / (1.0 + torch.exp(-x))


def gru_step(cell, x, h, carry=None):
    """dl4mt GRU: r, z from W x + U h; candidate tanh(W x + r ⊙ (U h)); h' = z h + (1-z) h̃.
    Li et al.'s eq. 11 and Zhang et al.'s eq. 7 print U (r ⊙ h); their released code, and the
    dl4mt baseline both compare against, compute r ⊙ (U h) (docs/encoders-and-adaptive.md)."""
    H = cell.hidden_size
    W, b, U = cell.W.weight, cell.W.bias, cell.U.weight
    Wr, Wz, Wh = W[:H], W[H:2 * H], W[2 * H:]
    br, bz, bh = b[:H], b[H:2 * H], b[2 * H:]
    Ur, Uz, Uh = U[:H], U[H:2 * H], U[2 * H:]
    r = sigmoid(Wr @ x + br + Ur @ h)
    z = sigmoid(Wz @ x + bz + Uz @ h)
    h_tilde = torch.tanh(Wh @ x + bh + r * (Uh @ h))
    return z * (h if carry is None else carry) + (1 - z) * h_tilde


def adaptive_gru_step(cell, x, h, scaled_candidate=False, gain=1.0, open_gate=None, carry=None):
    """Hyper-gated GRU (Li et al., eqs. 13–17): g = σ(W_g x + U_g h) (13);
    r = σ((1-g) ⊙ W_r x + g ⊙ U_r h) (14), z likewise (15); h̃ = tanh((1-g) ⊙ W x + g ⊙ r ⊙ (U h))
    (16, with the reset as in `gru_step`); h' = g ⊙ z ⊙ h + (1-z) ⊙ h̃ (17).
    scaled_candidate: the released code's second transition,
    h̃ = (1-g) ⊙ tanh(W x + g ⊙ r ⊙ (U h)).  gain: the weighted sums of r, z and h̃ times k
    (2 in adaptive-gru-scaled).  open_gate g₀ (adaptive-gru-balanced): the input terms weighed
    by (1-g)/(1-g₀) and the state terms by g/g₀ instead."""
    H = cell.hidden_size
    W, b, U = cell.W.weight, cell.W.bias, cell.U.weight

    def block(k):
        return W[k * H:(k + 1) * H] @ x + b[k * H:(k + 1) * H], U[k * H:(k + 1) * H] @ h

    (wr, ur), (wz, uz), (wh, uh), (wg, ug) = block(0), block(1), block(2), block(3)
    g = sigmoid(wg + ug)
    if open_gate is None:
        a = b = gain
    else:
        a, b = 1 / (1 - open_gate), 1 / open_gate
    r = sigmoid(a * (1 - g) * wr + b * g * ur)
    z = sigmoid(a * (1 - g) * wz + b * g * uz)
    if scaled_candidate:
        h_tilde = (1 - g) * torch.tanh(wh + g * r * uh)
    else:
        h_tilde = torch.tanh(a * (1 - g) * wh + b * g * r * uh)
    return g * z * (h if carry is None else carry) + (1 - z) * h_tilde


def cell_step(cell, x, h, carry=None):
    """One step of any registered cell, by its class name.  `carry`: the state the update
    interpolates with, where it is not the state the gates read (memory-RNN's GRU_2)."""
    name = type(cell).__name__
    if name == "GRUCell":
        return gru_step(cell, x, h, carry)
    if name in ("AdaptiveGRUCell", "ReleasedAdaptiveGRUCell"):
        return adaptive_gru_step(cell, x, h, carry=carry)
    if name == "ScaledAdaptiveGRUCell":
        return adaptive_gru_step(cell, x, h, gain=2.0, carry=carry)
    if name == "BalancedAdaptiveGRUCell":
        return adaptive_gru_step(cell, x, h, open_gate=0.8, carry=carry)
    if name == "ScaledCandidateAdaptiveGRUCell":
        return adaptive_gru_step(cell, x, h, scaled_candidate=True, carry=carry)
    raise AssertionError(f"no reference for cell {name}")


def run_cell(cell, xs, reverse=False, h0=None):
    """States of `cell` over the vectors xs, read left to right (or right to left), from h0 (default 0)."""
    h = torch.zeros(cell.hidden_size) if h0 is None else h0
    out = [None] * len(xs)
    for i in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
        h = cell_step(cell, xs[i], h)
        out[i] = h
    return out


def birnn_layer(layer, xs, h0=None):
    fwd, bwd = run_cell(layer.fwd, xs, h0=h0), run_cell(layer.bwd, xs, reverse=True, h0=h0)
    return [torch.cat([f, b]) for f, b in zip(fwd, bwd)]


def context_aware_encode(enc, xs, context_reverse, h0=None):
    """CAEncoder (Zhang et al.): h^c from the future GRU, read against the context-aware
    direction (eq. 6); h̃_i = GRU_lower(E x_i, h^a_{i∓1}) (eq. 8); h^a_i = GRU_upper(h^c_i, h̃_i)
    (eq. 9); annotations h^a_i; FCAE's context-aware layer runs left to right (eq. 10), BCAE's
    right to left (eq. 11)."""
    future = run_cell(enc.future, xs, reverse=not context_reverse, h0=h0)
    h = torch.zeros(enc.hidden_dim) if h0 is None else h0
    annotations = [None] * len(xs)
    for i in (range(len(xs) - 1, -1, -1) if context_reverse else range(len(xs))):
        h_tilde = cell_step(enc.lower, xs[i], h)
        h = cell_step(enc.upper, future[i], h_tilde)
        annotations[i] = h
    return annotations


def encode(model, src_ids, h0=None):
    """Annotations of one unpadded sentence, for every registered encoder; h0 starts every recurrence."""
    enc, name = model.encoder, model.cfg.encoder
    xs = [model.src_emb.weight[i] for i in src_ids]
    if name == "birnn":
        return torch.stack(birnn_layer(enc, xs, h0))
    if name == "stacked-birnn":
        for layer in enc.layers:  # the lower layer's [→h_i; ←h_i] is the upper layer's input
            xs = birnn_layer(layer, xs, h0)
        return torch.stack(xs)
    if name in ("fcae", "bcae"):
        return torch.stack(context_aware_encode(enc, xs, context_reverse=name == "bcae", h0=h0))
    raise AssertionError(f"no reference for encoder {name}")


def birnn_encode(model, src_ids, h0=None):
    """Annotations h_i = [→h_i; ←h_i] for one unpadded sentence; h0 starts both directions."""
    return encode(model, src_ids, h0)


def output_preactivation(out, s, d, c):
    """Deep output: W_st s + b + W_yt d + W_ct c.  Adaptive output: Σ_k α_k ⊙ o_k with
    o = (W_st s + b, W_yt d, W_ct c), õ = Σ_k o_k, e_k = W_p tanh(W_m (M_k x_k + b_k) + W_r õ + b_r)
    and α_k = exp(e_k) / Σ_k' exp(e_k'), dimension by dimension (eqs. 18–21 of Li et al., in the
    released code's form); times K = 3 for our adaptive-gain3 variant, which the paper does not have."""
    o = [out.from_state.weight @ s + out.from_state.bias, out.from_summary.weight @ d, out.from_context.weight @ c]
    if not hasattr(out, "W_p"):
        return o[0] + o[1] + o[2]
    query = o[0] + o[1] + o[2]
    own = [out.score_state.weight @ s + out.score_state.bias, out.score_summary.weight @ d + out.score_summary.bias,
           out.score_context.weight @ c + out.score_context.bias]
    e = [out.W_p.weight @ torch.tanh(out.W_m.weight @ m + out.W_r.weight @ query + out.W_r.bias) for m in own]
    exps = [torch.exp(e_k) for e_k in e]
    total = exps[0] + exps[1] + exps[2]
    gain = 3.0 if type(out).__name__ == "Gain3AdaptiveOutput" else 1.0
    return gain * sum((x / total) * o_k for x, o_k in zip(exps, o))


def additive_attention(att, s_prime, annotations):
    """α_i = softmax_i(v_aᵀ tanh(W_d s' + W_e h_i + b)), c = Σ α_i h_i."""
    energies = []
    for h_i in annotations:
        pre = att.query_proj.weight @ s_prime + att.key_proj.weight @ h_i + att.key_proj.bias
        energies.append((att.v.weight[0] * torch.tanh(pre)).sum())
    e = torch.stack(energies)
    alpha = torch.exp(e - e.max())
    alpha = alpha / alpha.sum()
    c = (alpha.unsqueeze(1) * annotations).sum(0)
    return alpha, c


def self_attentive_rnn_term(model, earlier_states, s):
    """The self-attentive RNN's output term (extended paper, eqs. 18–21 and appendix A.3.3):
    W_mt s̃_t, s̃_t = Σ_{i=1}^{t-1} α_ti s_i, α_t = softmax_i(vᵀ tanh(W_m s_i + W_s s_t));
    s̃_1 = 0, the empty sum."""
    dec = model.decoder
    if not earlier_states:
        return dec.from_memory.weight @ torch.zeros_like(s)
    e = torch.stack([(dec.v_m.weight[0] * torch.tanh(dec.W_m.weight @ m + dec.W_m.bias + dec.W_s.weight @ s)).sum()
                     for m in earlier_states])
    alpha = torch.softmax(e, 0)
    return dec.from_memory.weight @ sum(a * m for a, m in zip(alpha, earlier_states))


def memory_rnn_read(model, memory, y_prev, tilde_prev, s_0):
    """Eqs. 15–17 of the self-attentive residual decoder paper: s̃_t = Σ_{i=1}^{t-1} α_ti s_i
    over the memory [s_1 … s_{t-1}], α_t = softmax over i = 1 … t-1 of e_ti (appendix A.3.2's
    normalisation), e_ti = a(s_i, y_{t-1}, s̃_{t-1}) = vᵀ tanh(W_m s_i + b_m + W_q s̃_{t-1} +
    W_x E y_{t-1}).  At t = 1 the sum is empty and the papers define nothing: s̃_1 = s_0, the
    cGRU's first step (ours)."""
    if not memory:
        return s_0
    dec = model.decoder
    query = dec.W_q.weight @ tilde_prev + dec.W_x.weight @ y_prev
    e = torch.stack([(dec.v_m.weight[0] * torch.tanh(dec.W_m.weight @ m + dec.W_m.bias + query)).sum() for m in memory])
    alpha = torch.softmax(e, 0)
    return sum(a * m for a, m in zip(alpha, memory))


def rnnsearch_logprobs(model, src_ids, tgt_ids, summary=None):
    """log p(y_t | y_<t, x) for every target position of one sentence pair.

    `summary(t, prev_embs, s_t, c_t)` gives d_t from the list of previous
    embeddings [y_0, E y_1, …, E y_{t-1}] and the step's decoder state and
    context vector; default: the last embedding (the baseline)."""
    summary = summary or (lambda t, prev, s, c: prev[-1])
    dec = model.decoder
    annotations = encode(model, src_ids)
    s = torch.tanh(dec.init_proj.weight @ annotations.mean(0) + dec.init_proj.bias)
    prev_embs = [model.start.detach().clone()]
    out, alphas, states = [], [], []
    memory, tilde, s_0 = [], s, s  # memory-rnn: s_1 … s_{t-1} (eq. 15)
    for t, y in enumerate(tgt_ids):
        y_prev = prev_embs[-1]
        if model.cfg.decoder == "memory-rnn":
            # appendix A.3.2's change to the baseline, s_{t-1} → s̃_t, in both transitions'
            # recurrent terms; its GRU_2 input terms in E y_{t-1} are A.3's notation, not dl4mt's
            # cGRU the papers ran, and are left out as the baseline's are (docs/target-context.md)
            tilde = memory_rnn_read(model, memory, y_prev, tilde, s_0)
            s_prime = cell_step(dec.gru1, y_prev, tilde)
            alpha, c = additive_attention(dec.attention, s_prime, annotations)
            s = cell_step(dec.gru2, c, tilde, carry=s_prime)
        else:
            s_prime = cell_step(dec.gru1, y_prev, s)
            alpha, c = additive_attention(dec.attention, s_prime, annotations)
            s = cell_step(dec.gru2, c, s_prime)
        d = summary(t, prev_embs, s, c)
        pre = output_preactivation(dec.output, s, d, c)
        if model.cfg.decoder == "self-attentive-rnn":
            pre = pre + self_attentive_rnn_term(model, states, s)
        states.append(s)
        memory.append(s)
        readout = torch.tanh(pre)
        logits = model.generator.weight @ readout + model.generator.bias
        out.append(torch.log_softmax(logits, dim=0))
        alphas.append(alpha)
        prev_embs.append(model.tgt_emb.weight[y])
    return torch.stack(out), torch.stack(alphas)
