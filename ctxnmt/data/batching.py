"""Token-bucketed batching.

An epoch's batches are a pure function of (seed, epoch): sentences are
shuffled, stably sorted by length so that a batch holds similar lengths (little
padding), cut into batches under a target-token budget and a sentence cap, and
the batches are shuffled.  Resuming therefore needs only (epoch, batch index).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ctxnmt.data.documents import ListedContext
from ctxnmt.data.indexed import Side


@dataclass
class Context:
    """Each sentence's previous source sentences (document context), oldest first.

    Sentence b's n_b ≤ K context sentences fill slots 0 … n_b − 1; the other slots
    are empty (all PAD), and a sentence without context has only empty slots."""

    ids: torch.Tensor  # (B, K, L) PAD-padded
    mask: torch.Tensor  # (B, K, L) float, 1 on real tokens
    # The same sentences' target sides (B, K, L'), for a model that reads them (ctxnmt.models.context):
    # the references in training, the model's own translations in translation
    tgt_ids: torch.Tensor | None = None
    tgt_mask: torch.Tensor | None = None

    def to(self, device) -> Context:
        on = (lambda x: None if x is None else x.to(device))
        return Context(self.ids.to(device), self.mask.to(device), on(self.tgt_ids), on(self.tgt_mask))


@dataclass
class Batch:
    indices: torch.Tensor  # positions in the dataset
    src: torch.Tensor  # (B, S) ids, PAD-padded
    src_mask: torch.Tensor  # (B, S) float, 1 on real tokens
    tgt: torch.Tensor  # (B, T) ids ending in EOS
    tgt_mask: torch.Tensor
    context: Context | None = None

    @property
    def n_sents(self) -> int:
        return self.src.size(0)

    def to(self, device) -> Batch:
        return Batch(self.indices, self.src.to(device), self.src_mask.to(device), self.tgt.to(device),
                     self.tgt_mask.to(device), self.context.to(device) if self.context is not None else None)


def pad(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    return Side.from_lists(seqs).gather(np.arange(len(seqs)))


def pad_context(sentences: list[list[list[int]]], k: int | None = None,
                targets: list[list[list[int]]] | None = None) -> Context:
    """Context of each batch sentence (its last k id lists; by default all) as a padded (B, k, L)
    block; `targets`: the same sentences' target sides, for a model that reads them."""
    flat = [s for ctx in sentences for s in ctx]
    where, at = [], 0
    for ctx in sentences:
        where.append(list(range(at, at + len(ctx))))
        at += len(ctx)
    listed, rows = ListedContext(where, k or 0), np.arange(len(sentences))
    tgt = None
    if targets is not None:
        tgt = Side.from_lists([t for ctx in targets for t in ctx])
    return context_block(Side.from_lists(flat), listed, rows, tgt)


def context_block(src: Side, context, rows: np.ndarray, tgt: Side | None = None) -> Context:
    """The sentences that `context` (ctxnmt.data.documents) names for `rows`, as a block: their
    source sides, and their target sides where `tgt` is given."""
    positions, count = context.positions(rows)
    real = np.arange(positions.shape[1]) < count[:, None]

    def block(side: Side) -> tuple[torch.Tensor, torch.Tensor]:
        lens = np.zeros(positions.shape, dtype=np.int64)
        lens[real] = side.lens[positions[real]]
        ids, mask = side.gather(positions.reshape(-1), lens.reshape(-1))
        shape = (*positions.shape, ids.size(1))
        return ids.view(shape), mask.view(shape)

    return Context(*block(src), *(block(tgt) if tgt is not None else (None, None)))


def make_batch(indices, src: Side, tgt: Side, context=None, k: int = 0, target_context: bool = False) -> Batch:
    """The batch of the sentences at `indices` of `src` and `tgt`.  `context` names each
    sentence's previous sentences (ctxnmt.data.documents: a context source, or lists of
    positions, of which the last k count); with it the batch carries their source ids, and
    with `target_context` their reference translations too."""
    rows = np.asarray(indices, dtype=np.int64)
    s, sm = src.gather(rows)
    t, tm = tgt.gather(rows)
    ctx = None
    if context is not None:
        if isinstance(context, list):
            context = ListedContext(context, k)
        ctx = context_block(src, context, rows, tgt if target_context else None)
    return Batch(torch.from_numpy(rows), s, sm, t, tm, ctx)


class EpochBatches(Sequence):
    """An epoch's batches in training order, each a list of sentence indices; held as one
    permutation of the corpus and the batches' bounds in it, so an epoch of millions of
    sentences costs a few arrays, not a list per batch.  A slice is a view of the same arrays."""

    def __init__(self, order: np.ndarray, bounds: np.ndarray, sequence: np.ndarray):
        self.order, self.bounds, self.sequence = order, bounds, sequence

    def __len__(self) -> int:
        return len(self.sequence)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return EpochBatches(self.order, self.bounds, self.sequence[item])
        b = self.sequence[item]
        return self.order[self.bounds[b]:self.bounds[b + 1]].tolist()

    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)[self.sequence]


def epoch_batches(src_lens, tgt_lens, batch_tokens: int, batch_sents: int,
                  seed: int, epoch: int, shuffle: bool = True) -> EpochBatches:
    """One epoch's batches (sentence indices), in training order."""
    src_lens, tgt_lens = np.asarray(src_lens, dtype=np.int64), np.asarray(tgt_lens, dtype=np.int64)
    n = len(tgt_lens)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(n, generator=gen).numpy() if shuffle else np.arange(n)
    key = tgt_lens[order] * (int(src_lens.max(initial=0)) + 1) + src_lens[order]
    order = order[np.argsort(key, kind="stable")]  # stable: ties keep the shuffled order
    bounds = _cut(tgt_lens[order], batch_tokens, batch_sents)
    sequence = np.arange(len(bounds) - 1)
    if shuffle:
        sequence = torch.randperm(len(sequence), generator=gen).numpy()
    return EpochBatches(order, bounds, sequence)


def _cut(lens: np.ndarray, batch_tokens: int, batch_sents: int) -> np.ndarray:
    """Bounds of the batches that filling greedily in this order makes: a batch takes the next
    sentence while it holds fewer than `batch_sents` and its tokens stay within `batch_tokens`
    (a first sentence always)."""
    total = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=total[1:])
    bounds, start = [0], 0
    while start < len(lens):
        end = int(np.searchsorted(total, total[start] + batch_tokens, side="right")) - 1
        start = max(start + 1, min(end, start + batch_sents))
        bounds.append(start)
    return np.asarray(bounds, dtype=np.int64)


def padding_ratio(batches, src_lens, tgt_lens) -> tuple[float, float]:
    """Fraction of padded cells on the source and target side."""
    if not isinstance(batches, EpochBatches):
        batches = _as_epoch(batches)
    if not len(batches):
        return 0.0, 0.0
    firsts = batches.bounds[:-1]

    def ratio(lens):
        lens = np.asarray(lens, dtype=np.int64)[batches.order]
        real = int(np.add.reduceat(lens, firsts)[batches.sequence].sum())
        padded = int((batches.sizes() * np.maximum.reduceat(lens, firsts)[batches.sequence]).sum())
        return 1.0 - real / padded if padded else 0.0

    return ratio(src_lens), ratio(tgt_lens)


def _as_epoch(batches: list[list[int]]) -> EpochBatches:
    order = np.asarray([i for b in batches for i in b], dtype=np.int64)
    bounds = np.zeros(len(batches) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in batches], out=bounds[1:])
    return EpochBatches(order, bounds, np.arange(len(batches)))
