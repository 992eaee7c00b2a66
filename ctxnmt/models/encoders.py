"""Source encoders. Each returns annotations (B, S, out_dim); `out_dim` tells the
decoder how wide they are, so attention and initialisation sizes follow from
the encoder rather than from constants.

Every encoder takes an optional initial state h0 (B, state_dim) for all of its
recurrent layers (document context initialises the encoder with it); None is
the usual zero state."""
from __future__ import annotations

import torch
from torch import nn

from ctxnmt.models.cells import biscan
from ctxnmt.models.registry import CELLS, ENCODERS


class Encoder(nn.Module):
    out_dim: int
    state_dim: int  # size of the initial state h0 that forward accepts

    def forward(self, emb: torch.Tensor, mask: torch.Tensor,
                h0: torch.Tensor | None = None) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


@ENCODERS.register("birnn")
class BiRNNEncoder(Encoder):
    """h_i = [→h_i; ←h_i] from a forward and a backward GRU over the embeddings."""

    def __init__(self, emb_dim: int, hidden_dim: int, cell: str = "gru", **_):
        super().__init__()
        cell_cls = CELLS.get(cell)
        self.fwd = cell_cls(emb_dim, hidden_dim)
        self.bwd = cell_cls(emb_dim, hidden_dim)
        self.hidden_dim = self.state_dim = hidden_dim
        self.out_dim = 2 * hidden_dim

    def forward(self, emb: torch.Tensor, mask: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
        """h0 starts both directions (as in Wang et al.'s released code)."""
        if h0 is None:
            h0 = emb.new_zeros(emb.size(0), self.hidden_dim)
        fwd, bwd = biscan(self.fwd, self.bwd, self.fwd.input_proj(emb), self.bwd.input_proj(emb), h0, mask)
        return torch.cat([fwd, bwd], dim=-1)
