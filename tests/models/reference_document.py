"""Literal per-sentence, per-step implementations of Wang et al.'s cross-sentence
context, written from the equations (and, for the released gate, from the
authors' code) rather than from the fast batched code.  They read the fast
model's parameters so that the two can be compared number for number."""
from __future__ import annotations

import torch

from ctxnmt.data.vocab import UNK
from ctxnmt.models.document import DocumentSettings
from tests.models.reference import additive_attention, birnn_encode, gru_step, sigmoid


def hierarchical_summary(model, context):
    """D for one sentence: context = its previous sentences (id lists, oldest first).
    S_k = sentence GRU's last state over sentence k; D = document GRU's last state over S_1 … S_K."""
    doc = model.document
    if not context and model.cfg.settings(DocumentSettings).doc_start == "null-sentence":
        context = [[UNK]]  # the released code's history "NULL", a word outside its vocabulary
    emb = doc.history_emb if doc.history_emb is not None else model.src_emb
    d = torch.zeros(doc.doc_dim)
    for sentence in context:
        s_k = torch.zeros(doc.doc_dim)
        for i in sentence:
            s_k = gru_step(doc.sentence_rnn, emb.weight[i], s_k)
        d = gru_step(doc.document_rnn, s_k, d)
    return d


def _split3(x):
    n = x.size(0) // 3
    return x[:n], x[n:2 * n], x[2 * n:]


def gru_with_extra_input(cell, x, extra, h):
    """GRU step on the input [x; D'] with W = [W_x, W_D]: `extra` = W_D D' (3H, no bias)."""
    Wr, Wz, Wh = _split3(cell.W.weight)
    br, bz, bh = _split3(cell.W.bias)
    Ur, Uz, Uh = _split3(cell.U.weight)
    er, ez, eh = _split3(extra)
    r = sigmoid(Wr @ x + br + er + Ur @ h)
    z = sigmoid(Wz @ x + bz + ez + Uz @ h)
    h_tilde = torch.tanh(Wh @ x + bh + eh + r * (Uh @ h))
    return z * h + (1 - z) * h_tilde


def code_gated_gru(cell, c, doc_term, gate, h):
    """The released code's second cGRU transition: gates g interpolate the current
    sentence's terms with D's, biases outside: σ((1−g)(W c + U s') + g W_D D + b) …"""
    Wr, Wz, Wh = _split3(cell.W.weight)
    br, bz, bh = _split3(cell.W.bias)
    Ur, Uz, Uh = _split3(cell.U.weight)
    dr, dz, dh = _split3(doc_term)
    gr, gz, gh = _split3(gate)
    r = sigmoid((1 - gr) * (Wr @ c + Ur @ h) + gr * dr + br)
    z = sigmoid((1 - gz) * (Wz @ c + Uz @ h) + gz * dz + bz)
    h_tilde = torch.tanh((1 - gh) * (Wh @ c + r * (Uh @ h)) + gh * dh + bh)
    return z * h + (1 - z) * h_tilde


def document_logprobs(model, src_ids, tgt_ids, context, gates=None):
    """log p(y_t | y_<t, x, previous sentences) of a cGRU document-context model.
    `gates`, if a list, receives each step's gate vector."""
    cfg, dec = model.cfg.settings(DocumentSettings), model.decoder
    D = hierarchical_summary(model, context)
    h0 = None
    if cfg.doc_init_enc:
        proj = model.document.to_encoder
        h0 = D if proj is None else torch.tanh(proj.weight @ D)
    annotations = birnn_encode(model, src_ids, h0)
    pre = dec.init_proj.weight @ annotations.mean(0) + dec.init_proj.bias
    if cfg.doc_init_dec:
        pre = pre + dec.document.init_from_document.weight @ D
    s = torch.tanh(pre)
    di = dec.document
    prev = model.start.detach().clone()
    out = []
    for y in tgt_ids:
        s_prime = gru_step(dec.gru1, prev, s)
        _, c = additive_attention(dec.attention, s_prime, annotations)
        if cfg.doc_aux == "none":
            s_new = gru_step(dec.gru2, c, s_prime)
        elif cfg.doc_aux == "aux":
            s_new = gru_with_extra_input(dec.gru2, c, di.from_document.weight @ D, s_prime)
        elif cfg.doc_aux == "gated-aux":  # eq. 5: z_t = σ(U_z s_{t-1} + W_z E y_{t-1} + C_z c_t)
            b_z = di.gate_word.bias if cfg.doc_gate_bias else 0.0  # ours (doc_gate_bias): + b_z
            z = sigmoid(di.gate_state.weight @ s + di.gate_word.weight @ prev + b_z + di.gate_context.weight @ c)
            s_new = gru_with_extra_input(dec.gru2, c, di.from_document.weight @ (z * D), s_prime)
        else:  # gated-aux-code: g = σ(G_s s' + G_c c + G_D D + b)
            z = sigmoid(di.gate_state.weight @ s_prime + di.gate_context.weight @ c
                        + di.gate_document.weight @ D + di.gate_document.bias)
            s_new = code_gated_gru(dec.gru2, c, di.from_document.weight @ D, z, s_prime)
        if gates is not None and cfg.doc_aux.startswith("gated"):
            gates.append(z)
        s = s_new
        o = dec.output
        readout = torch.tanh(o.from_state.weight @ s + o.from_state.bias + o.from_summary.weight @ prev
                             + o.from_context.weight @ c)
        out.append(torch.log_softmax(model.generator.weight @ readout + model.generator.bias, dim=0))
        prev = model.tgt_emb.weight[y]
    return torch.stack(out)
