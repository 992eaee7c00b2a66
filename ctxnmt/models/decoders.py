"""Decoders: from annotations and previous target words to readout vectors t_t.

A decoder has two modes that must agree to 1e-5 (tests check it):
  forward(enc, prev_emb, tgt_mask)   teacher forcing over a whole batch
  init_state(enc) / step(...)        one step at a time, as beam search runs it
"""
from __future__ import annotations

import torch
from torch import nn

from ctxnmt.models.attention import AdditiveAttention
from ctxnmt.models.functional import mix
from ctxnmt.models.output import DeepOutput
from ctxnmt.models.registry import CELLS, DECODERS, TARGET_CONTEXTS


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(1) / m.sum(1).clamp(min=1.0)


@DECODERS.register("cgru")
class ConditionalGRUDecoder(nn.Module):
    """dl4mt's conditional GRU with additive attention.

    s'_t = GRU_1(E y_{t-1}, s_{t-1});  α_t = softmax_i(v_aᵀ tanh(W_d s'_t + W_e h_i))
    c_t = Σ_i α_ti h_i;  s_t = GRU_2(c_t, s'_t);  s_0 = tanh(W_init · mean_i h_i).

    Speed without changing the arithmetic: GRU_2's input term W c_t equals
    Σ_i α_ti (W h_i) because α_t sums to one, so W h_i is computed once per
    sentence and each step only mixes it with α_t; c_t itself is needed only by
    the deep output and is formed for all steps at once after the loop.
    """

    def __init__(self, emb_dim: int, hidden_dim: int, att_dim: int, ctx_dim: int, out_dim: int,
                 cell: str = "gru", target_context: str = "previous", dropout_hidden: float = 0.0, **_):
        super().__init__()
        cell_cls = CELLS.get(cell)
        self.hidden_dim, self.att_dim = hidden_dim, att_dim
        self.init_proj = nn.Linear(ctx_dim, hidden_dim)
        self.gru1 = cell_cls(emb_dim, hidden_dim)
        self.attention = AdditiveAttention(hidden_dim, ctx_dim, att_dim)
        self.gru2 = cell_cls(ctx_dim, hidden_dim)
        self.summary = TARGET_CONTEXTS.get(target_context)(emb_dim=emb_dim, hidden_dim=hidden_dim,
                                                           ctx_dim=ctx_dim)
        self.output = DeepOutput(hidden_dim, self.summary.out_dim, ctx_dim, out_dim)
        self.dropout_hidden = nn.Dropout(dropout_hidden)

    # -- encoder-side work, once per sentence ---------------------------------------
    def prepare(self, annotations: torch.Tensor, src_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "annotations": annotations,
            "src_mask": src_mask,
            "keys": self.attention.precompute(annotations),
            "values": self.gru2.input_proj(annotations),
            # Recurrent matrices gathered once per batch, not once per step; a leading
            # underscore marks entries without a batch dimension (never reordered).
            "_U1": self.gru1.hidden_weight(),
            "_Wq": self._query_weight(),
        }

    def initial_state(self, enc: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.tanh(self.init_proj(masked_mean(enc["annotations"], enc["src_mask"])))

    def _query_weight(self) -> torch.Tensor:
        # s'_t feeds both W_d (attention) and U of GRU_2: one matmul serves both.
        return torch.cat([self.attention.query_proj.weight.t(), self.gru2.hidden_weight()], dim=1)

    def _transition(self, enc, s, xp1_t):
        s1 = self.gru1.combine(xp1_t, s @ enc["_U1"], s)
        q = s1 @ enc["_Wq"]
        alpha = self.attention.weights(q[:, : self.att_dim], enc["keys"], enc["src_mask"])
        xp2 = mix(alpha, enc["values"])
        s = self.gru2.combine(xp2, q[:, self.att_dim:], s1)
        return s, alpha

    # -- teacher forcing ---------------------------------------------------------
    def forward(self, enc, prev_emb: torch.Tensor, tgt_mask: torch.Tensor):
        """Returns readout vectors (B, T, out_dim) and attention weights (B, T, S)."""
        s = self.initial_state(enc)
        xp1 = self.gru1.input_proj(prev_emb)
        states, alphas = [], []
        for xp1_t in xp1.unbind(1):  # unbind: a per-step slice has a costly backward
            s, alpha = self._transition(enc, s, xp1_t)
            states.append(s)
            alphas.append(alpha)
        S = torch.stack(states, dim=1)
        A = torch.stack(alphas, dim=1)
        C = torch.bmm(A, enc["annotations"])
        D = self.summary.full(prev_emb, tgt_mask, S, C)
        return self.output(self.dropout_hidden(S), D, C), A

    # -- incremental decoding ----------------------------------------------------
    def init_state(self, enc, beam: int = 1) -> dict[str, torch.Tensor]:
        """State rows for `beam` hypotheses per sentence (sentence-major)."""
        s = self.initial_state(enc).repeat_interleave(beam, dim=0)
        return {"s": s, **self.summary.init_state(s.size(0), s)}

    def step(self, enc, state: dict[str, torch.Tensor], prev_emb_t: torch.Tensor):
        """One step: readout (R, out_dim), new state, α_t (R, S); R = beam × sentences."""
        s, alpha = self._transition(enc, state["s"], self.gru1.input_proj(prev_emb_t))
        c = mix(alpha, enc["annotations"])
        summary_state = {k: v for k, v in state.items() if k != "s"}
        d, summary_state = self.summary.step(summary_state, prev_emb_t, s, c)
        return self.output(s, d, c), {"s": s, **summary_state}, alpha
