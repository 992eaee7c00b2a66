"""Token-bucketed batching.

An epoch's batches are a pure function of (seed, epoch): sentences are
shuffled, stably sorted by length so that a batch holds similar lengths (little
padding), cut into batches under a target-token budget and a sentence cap, and
the batches are shuffled.  Resuming therefore needs only (epoch, batch index).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ctxnmt.data.vocab import PAD


@dataclass
class Context:
    """Each sentence's previous source sentences (document context), oldest first.

    Sentence b's n_b ≤ K context sentences fill slots 0 … n_b − 1; the other slots
    are empty (all PAD), and a sentence without context has only empty slots."""

    ids: torch.Tensor  # (B, K, L) PAD-padded
    mask: torch.Tensor  # (B, K, L) float, 1 on real tokens

    def to(self, device) -> Context:
        return Context(self.ids.to(device), self.mask.to(device))


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
    width = max(1, max(len(s) for s in seqs))
    ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return ids, (ids != PAD).float()


def pad_context(sentences: list[list[list[int]]], k: int | None = None) -> Context:
    """Context of each batch sentence (its last k id lists; by default all) as a padded (B, k, L) block."""
    k = k or max([1] + [len(ctx) for ctx in sentences])
    width = max([1] + [len(s) for ctx in sentences for s in ctx])
    ids = torch.full((len(sentences), k, width), PAD, dtype=torch.long)
    for b, ctx in enumerate(sentences):
        for j, s in enumerate(ctx[-k:]):
            ids[b, j, : len(s)] = torch.tensor(s, dtype=torch.long)
    return Context(ids, (ids != PAD).float())


def make_batch(indices: list[int], src: list[list[int]], tgt: list[list[int]],
               context: list[list[int]] | None = None, k: int = 0) -> Batch:
    """`context[i]` lists the dataset positions of sentence i's previous sentences (see
    ctxnmt.data.documents); with it the batch carries their source ids, at most k each."""
    s, sm = pad([src[i] for i in indices])
    t, tm = pad([tgt[i] for i in indices])
    ctx = None
    if context is not None:
        ctx = pad_context([[src[j] for j in context[i]] for i in indices], k)
    return Batch(torch.tensor(indices), s, sm, t, tm, ctx)


def epoch_batches(src_lens: list[int], tgt_lens: list[int], batch_tokens: int, batch_sents: int,
                  seed: int, epoch: int, shuffle: bool = True) -> list[list[int]]:
    """Index lists of one epoch's batches, in training order."""
    n = len(tgt_lens)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(n, generator=gen).tolist() if shuffle else list(range(n))
    order.sort(key=lambda i: (tgt_lens[i], src_lens[i]))  # stable: ties keep the shuffled order
    batches, current, tokens = [], [], 0
    for i in order:
        if current and (len(current) >= batch_sents or tokens + tgt_lens[i] > batch_tokens):
            batches.append(current)
            current, tokens = [], 0
        current.append(i)
        tokens += tgt_lens[i]
    if current:
        batches.append(current)
    if shuffle:
        perm = torch.randperm(len(batches), generator=gen).tolist()
        batches = [batches[p] for p in perm]
    return batches


def padding_ratio(batches: list[list[int]], src_lens: list[int], tgt_lens: list[int]) -> tuple[float, float]:
    """Fraction of padded cells on the source and target side."""
    def ratio(lens):
        real = sum(lens[i] for b in batches for i in b)
        padded = sum(len(b) * max(lens[i] for i in b) for b in batches)
        return 1.0 - real / padded if padded else 0.0

    return ratio(src_lens), ratio(tgt_lens)
