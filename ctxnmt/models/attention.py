"""Additive (Bahdanau) attention: e_ti = v_aᵀ tanh(W_d q_t + W_e h_i)."""
from __future__ import annotations

import torch
from torch import nn


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
        """α_t from an already projected query (B, A) and precomputed keys (B, S, A)."""
        energy = self.v(torch.tanh(keys + query_att.unsqueeze(1))).squeeze(-1)
        return masked_softmax(energy, mask)
