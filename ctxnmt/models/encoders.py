"""Source encoders. Each returns annotations (B, S, out_dim); `out_dim` tells the
decoder how wide they are, so attention and initialisation sizes follow from
the encoder rather than from constants."""
from __future__ import annotations

import torch
from torch import nn

from ctxnmt.models.cells import biscan
from ctxnmt.models.registry import CELLS, ENCODERS


class Encoder(nn.Module):
    out_dim: int

    def forward(self, emb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


@ENCODERS.register("birnn")
class BiRNNEncoder(Encoder):
    """h_i = [→h_i; ←h_i] from a forward and a backward GRU over the embeddings."""

    def __init__(self, emb_dim: int, hidden_dim: int, cell: str = "gru", **_):
        super().__init__()
        cell_cls = CELLS.get(cell)
        self.fwd = cell_cls(emb_dim, hidden_dim)
        self.bwd = cell_cls(emb_dim, hidden_dim)
        self.hidden_dim = hidden_dim
        self.out_dim = 2 * hidden_dim

    def forward(self, emb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h0 = emb.new_zeros(emb.size(0), self.hidden_dim)
        fwd, bwd = biscan(self.fwd, self.bwd, self.fwd.input_proj(emb), self.bwd.input_proj(emb), h0, mask)
        return torch.cat([fwd, bwd], dim=-1)
