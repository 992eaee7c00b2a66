"""Forced decoding: the log-probability a model gives each token of a given target.

The model is stepped as search steps it (`Searchable`: encode, init_state, step), fed the
given target instead of its own choices, so one path scores a single model and an
ensemble (its combined distribution) alike; the tests hold step-wise decoding equal to
the teacher-forced forward pass.  What context-use measures (CXMI, contrastive pronoun
scoring) and rescoring read.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ctxnmt.data.batching import pad, pad_context
from ctxnmt.decoding.searchable import Searchable


@dataclass
class ForcedScore:
    tokens: list[str]  # the target's subwords, "</s>" last
    log_probs: np.ndarray  # (len(tokens),) float64: log p(y_t | y_<t, x, C), natural log

    @property
    def total(self) -> float:
        return float(self.log_probs.sum())


@torch.no_grad()
def forced_log_probs(model: Searchable, src_ids: list[list[int]], tgt_ids: list[list[int]],
                     context: list[list[list[int]]] | None = None, batch_size: int = 64,
                     device="cpu", target_context: list[list[list[int]]] | None = None) -> list[np.ndarray]:
    """log p(y_t | y_<t, x, C) for every token of every target (ids ending in EOS), batched
    by source length.  `context[i]`: sentence i's previous source sentences (id lists, oldest
    first), for a document-context model, and `target_context[i]` their target sides, for one that
    reads them.  The model is in evaluation mode (no dropout)."""
    out: list[np.ndarray] = [np.zeros(0)] * len(src_ids)
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]), reverse=True)
    for start in range(0, len(order), batch_size):
        index = order[start: start + batch_size]
        src, mask = (t.to(device) for t in pad([src_ids[i] for i in index]))
        tgt, tgt_mask = pad([tgt_ids[i] for i in index])
        targets = None if target_context is None else [target_context[i] for i in index]
        ctx = None if context is None else pad_context([context[i] for i in index], targets=targets).to(device)
        scores = _step_through(model, src, mask, ctx, tgt.to(device)).cpu().double().numpy()
        for row, i in enumerate(index):
            out[i] = scores[row, : len(tgt_ids[i])]
    return out


def _step_through(model: Searchable, src, mask, ctx, tgt: torch.Tensor) -> torch.Tensor:
    """(B, T) log-probabilities of `tgt`'s tokens, each step fed the previous given token."""
    enc = model.encode(src, mask, ctx)
    state = model.init_state(enc)
    columns, previous = [], None
    for t in range(tgt.size(1)):
        logp, state, _ = model.step(enc, state, previous)
        previous = tgt[:, t]
        columns.append(logp.float().gather(1, previous[:, None]).squeeze(1))
    return torch.stack(columns, dim=1)
