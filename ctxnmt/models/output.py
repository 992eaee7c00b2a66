"""Deep output layer: t_t = tanh(W_st s_t + W_yt d_t + W_ct c_t), p(y_t) = softmax(W_o t_t)."""
from __future__ import annotations

import torch
from torch import nn


class DeepOutput(nn.Module):
    def __init__(self, state_dim: int, summary_dim: int, ctx_dim: int, out_dim: int):
        super().__init__()
        self.from_state = nn.Linear(state_dim, out_dim)  # W_st (carries the single bias)
        self.from_summary = nn.Linear(summary_dim, out_dim, bias=False)  # W_yt (W_dt with a target context)
        self.from_context = nn.Linear(ctx_dim, out_dim, bias=False)  # W_ct
        self.out_dim = out_dim

    def forward(self, s: torch.Tensor, d: torch.Tensor, c: torch.Tensor, extra: torch.Tensor | None = None):
        """`extra` is an additional pre-activation term that a decoder variant contributes."""
        pre = self.from_state(s) + self.from_summary(d) + self.from_context(c)
        return torch.tanh(pre if extra is None else pre + extra)
