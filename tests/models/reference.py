"""Slow, literal implementations of the papers' equations, one sentence and one
time step at a time, written from the equations rather than from the fast code.
They read the fast model's parameters so the two can be compared number for number."""
from __future__ import annotations

import torch


def sigmoid(x):
    return 1.0 / (1.0 + torch.exp(-x))


def gru_step(cell, x, h):
    """dl4mt GRU: r, z from W x + U h; candidate tanh(W x + r ⊙ (U h)); h' = z h + (1-z) h̃."""
    H = cell.hidden_size
    W, b, U = cell.W.weight, cell.W.bias, cell.U.weight
    Wr, Wz, Wh = W[:H], W[H:2 * H], W[2 * H:]
    br, bz, bh = b[:H], b[H:2 * H], b[2 * H:]
    Ur, Uz, Uh = U[:H], U[H:2 * H], U[2 * H:]
    r = sigmoid(Wr @ x + br + Ur @ h)
    z = sigmoid(Wz @ x + bz + Uz @ h)
    h_tilde = torch.tanh(Wh @ x + bh + r * (Uh @ h))
    return z * h + (1 - z) * h_tilde


def birnn_encode(model, src_ids, h0=None):
    """Annotations h_i = [→h_i; ←h_i] for one unpadded sentence; h0 starts both directions."""
    enc = model.encoder
    xs = [model.src_emb.weight[i] for i in src_ids]
    H = enc.hidden_dim
    h = torch.zeros(H) if h0 is None else h0
    fwd = []
    for x in xs:
        h = gru_step(enc.fwd, x, h)
        fwd.append(h)
    h = torch.zeros(H) if h0 is None else h0
    bwd = [None] * len(xs)
    for i in range(len(xs) - 1, -1, -1):
        h = gru_step(enc.bwd, xs[i], h)
        bwd[i] = h
    return torch.stack([torch.cat([f, b]) for f, b in zip(fwd, bwd)])


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
    """W_mt s̃_t, s̃_t = Σ_{i<t} α_ti s_i, α_t = softmax_i(vᵀ tanh(W_m s_i + W_s s_t)); s̃_1 = 0."""
    dec = model.decoder
    if not earlier_states:
        return dec.from_memory.weight @ torch.zeros_like(s)
    e = torch.stack([(dec.v_m.weight[0] * torch.tanh(dec.W_m.weight @ m + dec.W_m.bias + dec.W_s.weight @ s)).sum()
                     for m in earlier_states])
    alpha = torch.softmax(e, 0)
    return dec.from_memory.weight @ sum(a * m for a, m in zip(alpha, earlier_states))


def rnnsearch_logprobs(model, src_ids, tgt_ids, summary=None):
    """log p(y_t | y_<t, x) for every target position of one sentence pair.

    `summary(t, prev_embs, s_t, c_t)` gives d_t from the list of previous
    embeddings [y_0, E y_1, …, E y_{t-1}] and the step's decoder state and
    context vector; default: the last embedding (the baseline)."""
    summary = summary or (lambda t, prev, s, c: prev[-1])
    dec = model.decoder
    annotations = birnn_encode(model, src_ids)
    s = torch.tanh(dec.init_proj.weight @ annotations.mean(0) + dec.init_proj.bias)
    prev_embs = [model.start.detach().clone()]
    out, alphas, states = [], [], []
    for t, y in enumerate(tgt_ids):
        y_prev = prev_embs[-1]
        s_prime = gru_step(dec.gru1, y_prev, s)
        alpha, c = additive_attention(dec.attention, s_prime, annotations)
        s = gru_step(dec.gru2, c, s_prime)
        d = summary(t, prev_embs, s, c)
        o = dec.output
        pre = o.from_state.weight @ s + o.from_state.bias + o.from_summary.weight @ d + o.from_context.weight @ c
        if model.cfg.decoder == "self-attentive-rnn":
            pre = pre + self_attentive_rnn_term(model, states, s)
        states.append(s)
        readout = torch.tanh(pre)
        logits = model.generator.weight @ readout + model.generator.bias
        out.append(torch.log_softmax(logits, dim=0))
        alphas.append(alpha)
        prev_embs.append(model.tgt_emb.weight[y])
    return torch.stack(out), torch.stack(alphas)
