"""Words of subword sequences: a subword starts a word unless the one before it ends with the
BPE separator.  The one definition that the training word ratio (prepare's `words 0.5`) and
beam search's length-ratio prior both count with, so that r and W(y) / W(x) agree."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ctxnmt.data.preprocess import BPE_SEPARATOR
from ctxnmt.data.vocab import Vocab


def goes_on(vocab: Vocab) -> torch.Tensor:
    """(V,) bool: whether each subword of `vocab` goes on into the next one."""
    return torch.tensor([token.endswith(BPE_SEPARATOR) for token in vocab.tokens()], dtype=torch.bool)


@dataclass(frozen=True)
class WordBoundaries:
    """Which subwords of each vocabulary go on into the next one: what counting words needs."""
    src_continues: torch.Tensor
    tgt_continues: torch.Tensor

    @classmethod
    def of(cls, src_vocab: Vocab, tgt_vocab: Vocab) -> WordBoundaries:
        return cls(goes_on(src_vocab), goes_on(tgt_vocab))


def word_starts(ids: torch.Tensor, real: torch.Tensor, continues: torch.Tensor) -> torch.Tensor:
    """Per row of `ids` (R, T), the words among its `real` positions (R, T): a real subword
    starts a word unless the real subword before it goes on into it."""
    joined = continues.to(ids.device)[ids] & real
    before = torch.zeros_like(joined)
    before[:, 1:] = joined[:, :-1]
    return (real & ~before).sum(1)


CHUNK = 4096  # sequences padded together: memory stays bounded whatever the corpus size


def count_words(seqs: Sequence[Sequence[int]], continues: torch.Tensor) -> list[int]:
    """The words of each subword sequence (a word cut short still counts; an empty one has none)."""
    counts: list[int] = []
    for start in range(0, len(seqs), CHUNK):
        chunk = seqs[start:start + CHUNK]
        width = max(1, max(len(s) for s in chunk))
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        real = torch.zeros(len(chunk), width, dtype=torch.bool)
        for row, seq in enumerate(chunk):
            ids[row, :len(seq)] = torch.as_tensor(seq, dtype=torch.long)
            real[row, :len(seq)] = True
        counts += word_starts(ids, real, continues).tolist()
    return counts
