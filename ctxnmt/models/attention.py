"""Additive (Bahdanau) attention: e_ti = v_aᵀ tanh(W_d q_t + W_e h_i)."""
from __future__ import annotations

import torch
from torch import nn

from ctxnmt.models.functional import additive_energy


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax that gives exactly zero weight where mask == 0."""
    scores = scores.masked_fill(mask == 0, float("-inf"))
    return torch.softmax(scores, dim=dim)


class AdditiveAttention(nn.Module):
    def __init__(self, query_dim: int, key_dim: int, att_dim: int):
        super().__init__()
        self.key_proj = nn.Linear(key_dim, att_dim)  # W_e h_i + b, once per sentence
        self.query_proj = nn.Linear(query_dim, att_dim, bias=False)  # W_d
        self.v = nn.Linear(att_dim, 1, bias=False)

    def precompute(self, annotations: torch.Tensor) -> torch.Tensor:
        return self.key_proj(annotations)

    def weights(self, query_att: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """α_t (R, S) from projected queries (R, A) and precomputed keys (N, S, A).

        R may be a multiple K of N: rows k·K … k·K+K−1 are hypotheses of sentence
        k (beam search), which then share one copy of that sentence's keys."""
        N, S, A = keys.shape
        K = query_att.size(0) // N
        energy = additive_energy(keys, query_att.view(N, K, A), self.v.weight[0], mask).view(N * K, S)
        if K > 1:
            mask = mask.unsqueeze(1).expand(N, K, S).reshape(N * K, S)
        return masked_softmax(energy, mask)

