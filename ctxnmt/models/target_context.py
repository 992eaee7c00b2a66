"""Target-context summaries d_t: what the deep output sees of the words
generated so far.  Each summary works in two modes with the same numbers:

  full(Y, mask)          all steps at once for teacher forcing; Y holds the
                         shifted target embeddings [y_0, E y_1, …, E y_{T-1}]
  init_state / step      one step at a time for beam search, carrying a state
                         dict whose tensors have the batch first (reordered by
                         index_select with the beam)
"""
from __future__ import annotations

import torch
from torch import nn

from ctxnmt.models.registry import TARGET_CONTEXTS


class TargetContext(nn.Module):
    def __init__(self, emb_dim: int, **_):
        super().__init__()
        self.out_dim = emb_dim

    def full(self, prev_emb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def init_state(self, batch: int, like: torch.Tensor) -> dict[str, torch.Tensor]:
        return {}

    def step(self, state: dict[str, torch.Tensor], prev_emb: torch.Tensor):  # pragma: no cover
        raise NotImplementedError


@TARGET_CONTEXTS.register("previous")
class PreviousWord(TargetContext):
    """The baseline: d_t = E y_{t-1}."""

    def full(self, prev_emb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return prev_emb

    def step(self, state, prev_emb):
        return prev_emb, state
