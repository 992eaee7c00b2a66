"""Words of subword sequences: a subword starts a word unless it is joined to the one before
it, which BPE marks on that one (it ends with the separator: "new@@ found@@ land") and
SentencePiece on this one (it does not start with ▁: "▁new found land"; a lone ▁ goes on
into the next piece, see piece_goes_on).  The one definition
that the training word ratio (prepare's `words 0.5`), beam search's length-ratio prior and
the analyses' word groups count with, so that r and W(y) / W(x) agree, and that decoding's
joining of subwords (ctxnmt.data.preprocess) spells out."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ctxnmt.data.indexed import Side
from ctxnmt.data.preprocess import BPE_SCHEME, BPE_SEPARATOR, SENTENCEPIECE_SCHEME, WORD_START
from ctxnmt.data.vocab import Vocab


def piece_goes_on(piece: str, scheme: str = BPE_SCHEME) -> bool:
    """Whether the subword after `piece`, whatever it is, belongs to the same word.  A lone ▁
    holds no letter: it only marks where its word starts (SentencePiece writes one before a
    piece without ▁), so a second mark after it would count a word that decoding drops."""
    if scheme == SENTENCEPIECE_SCHEME:
        return piece == WORD_START
    return piece.endswith(BPE_SEPARATOR)


def piece_joins_back(piece: str, scheme: str = BPE_SCHEME) -> bool:
    """Whether `piece` belongs to the word of the subword before it, whatever that is (for
    SentencePiece a special symbol too: decoding joins an unknown piece on, as it joins a
    piece of unknown characters that follows a lone ▁)."""
    return scheme == SENTENCEPIECE_SCHEME and not piece.startswith(WORD_START)


def goes_on(vocab: Vocab, scheme: str = BPE_SCHEME) -> torch.Tensor:
    """(V,) bool: whether each subword of `vocab` goes on into the next one."""
    return torch.tensor([piece_goes_on(token, scheme) for token in vocab.tokens()], dtype=torch.bool)


def joins_back(vocab: Vocab, scheme: str = BPE_SCHEME) -> torch.Tensor | None:
    """(V,) bool: whether each subword of `vocab` joins on to the one before it; None where
    none does (BPE)."""
    if scheme != SENTENCEPIECE_SCHEME:
        return None
    return torch.tensor([piece_joins_back(token, scheme) for token in vocab.tokens()], dtype=torch.bool)


@dataclass(frozen=True)
class WordBoundaries:
    """Which subwords of each vocabulary go on into the next one, and which join on to the one
    before (None: none does): what counting words needs."""
    src_continues: torch.Tensor
    tgt_continues: torch.Tensor
    src_joins_back: torch.Tensor | None = None
    tgt_joins_back: torch.Tensor | None = None

    @classmethod
    def of(cls, src_vocab: Vocab, tgt_vocab: Vocab, scheme: str = BPE_SCHEME) -> WordBoundaries:
        return cls(goes_on(src_vocab, scheme), goes_on(tgt_vocab, scheme),
                   joins_back(src_vocab, scheme), joins_back(tgt_vocab, scheme))


def word_starts(ids: torch.Tensor, real: torch.Tensor, continues: torch.Tensor,
                joins_back: torch.Tensor | None = None) -> torch.Tensor:
    """Per row of `ids` (R, T), the words among its `real` positions (R, T): a real subword
    starts a word unless the real subword before it goes on into it, or it joins back on to
    a real subword before it."""
    joined = continues.to(ids.device)[ids] & real
    before = torch.zeros_like(joined)
    before[:, 1:] = joined[:, :-1]
    if joins_back is not None:
        before[:, 1:] |= joins_back.to(ids.device)[ids[:, 1:]] & real[:, :-1]
    return (real & ~before).sum(1)


def word_groups(pieces: Sequence[str], scheme: str = BPE_SCHEME) -> list[list[int]]:
    """Indices of the subwords of each word of `pieces` ("new@@ found@@ land" is one word)."""
    groups: list[list[int]] = []
    for i, piece in enumerate(pieces):
        if groups and (piece_goes_on(pieces[i - 1], scheme) or piece_joins_back(piece, scheme)):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def join_word(pieces: Sequence[str], group: list[int], scheme: str = BPE_SCHEME) -> str:
    """The word that the subwords `group` of `pieces` spell."""
    if scheme == SENTENCEPIECE_SCHEME:
        return "".join(pieces[i] for i in group).replace(WORD_START, "")
    return "".join(pieces[i].removesuffix(BPE_SEPARATOR) for i in group)


CHUNK = 4096  # sequences padded together: memory stays bounded whatever the corpus size


def count_words(side: Side, continues: torch.Tensor, rows=None, lens=None, joins_back: torch.Tensor | None = None
                ) -> np.ndarray:
    """The words of each subword sequence (a word cut short still counts; an empty one has none):
    of `side`, the sequences `rows` (default: all), each cut to `lens`."""
    rows = np.arange(len(side)) if rows is None else np.asarray(rows, dtype=np.int64)
    lens = side.lens[rows] if lens is None else np.asarray(lens, dtype=np.int64)
    counts = np.zeros(len(rows), dtype=np.int64)
    for start in range(0, len(rows), CHUNK):
        ids, real = side.gather(rows[start:start + CHUNK], lens[start:start + CHUNK])
        counts[start:start + CHUNK] = word_starts(ids, real.bool(), continues, joins_back).numpy()
    return counts
