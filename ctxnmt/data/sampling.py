"""Subword regularisation: sampled segmentations of the training pairs, another for each epoch.

BPE-dropout (Provilkov et al. 2020; `data.bpe_dropout: p`) skips each merge with probability p
while a word is segmented; SentencePiece sampling (Kudo 2018; `data.sentencepiece_alpha: a`)
draws a segmentation from all of the model's, smoothed by a.  The training split is
memory-mapped ids (ctxnmt.data.indexed), not words, so a batch cannot be segmented afresh
without keeping the words and the segmenter in every rank.  Instead `prepare` writes K =
`data.subword_samples` sampled segmentations of the training pairs beside the deterministic
one, each a TokenArrays directory of its own (`prep/train-sample-0` …), row for row the
deterministic split's pairs (its length filter decides for all), and epoch e trains on sample
e mod K.  Memory stays flat (the samples are mapped like the split, one at a time); the disk
holds K + 1 copies of the training ids.  The samples' subwords are counted into the
vocabulary, so that a merge dropped never makes an unknown word (docs/data.md says why).
Dev, test and translation read the deterministic segmentation alone.  Each block's sample k is drawn from a seed of (block, k) alone, so the samples are the
same for any number of `prepare --workers`.
"""
from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import sentencepiece
from subword_nmt.apply_bpe import BPE

from ctxnmt.data.indexed import META, TokenArrays
from ctxnmt.data.preprocess import SentencePieceModel
from ctxnmt.data.settings import DataConfig


@dataclass(frozen=True)
class Sampling:
    """How the training pairs' segmentations are drawn: BPE's merge dropout or SentencePiece's
    smoothing (one of them is set), and how many samples prepare writes."""

    bpe_dropout: float = 0.0
    alpha: float = 0.0
    samples: int = 0

    @classmethod
    def of(cls, data: DataConfig) -> Sampling | None:
        """The data section's sampling, None where it samples nothing (the deterministic split alone)."""
        if not (data.bpe_dropout or data.sentencepiece_alpha):
            return None
        return cls(data.bpe_dropout, data.sentencepiece_alpha, data.subword_samples)


def sample_seed(block: int, sample: int) -> int:
    """A 32-bit seed (what SentencePiece takes) of a block's sample, of nothing else."""
    return int.from_bytes(hashlib.blake2b(f"{block}/{sample}".encode(), digest_size=4).digest(), "little")


@contextlib.contextmanager
def seeded(block: int, sample: int) -> Iterator[None]:
    """Both generators the samplers draw from, seeded for one block's sample: subword-nmt's
    dropout draws from Python's global `random` (its state is given back after, so the rest of the
    process sees none of this) and SentencePiece from its own."""
    seed = sample_seed(block, sample)
    state = random.getstate()
    random.seed(seed)
    sentencepiece.set_random_generator_seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


class Sampler:
    """Draws segmentations of word lists from one side's subword model.  A BPE model must be its
    own, not the deterministic segmenter's: subword-nmt writes what dropout gave into the cache
    that segmentation without dropout reads."""

    def __init__(self, model: BPE | SentencePieceModel, sampling: Sampling):
        self.model, self.sampling = model, sampling

    def segment(self, words: list[str]) -> list[str]:
        if isinstance(self.model, SentencePieceModel):
            return self.model.sample_tokens(words, self.sampling.alpha)
        pieces = self.model.segment_tokens(words, dropout=self.sampling.bpe_dropout)
        self.model.cache.clear()  # never read with dropout: only memory
        return pieces


def sample_directory(train: Path, sample: int) -> Path:
    """Where sample `sample` of the training split in `train` lives: beside it."""
    return train.with_name(f"{train.name}-sample-{sample}")


class TrainingSamples(Sequence):
    """The sampled segmentations beside a training split (none where the data was prepared
    without sampling), in order, each sharing the split's document numbers.  One is mapped at a
    time: a mapped split holds its sentences' lengths in memory, and an epoch reads one sample."""

    def __init__(self, directory: Path, train: TokenArrays):
        self.directory, self.train = directory, train
        self.count = 0
        while (sample_directory(directory, self.count) / META).is_file():
            self.count += 1
        self._mapped: tuple[int, TokenArrays] | None = None

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, sample: int) -> TokenArrays:
        if not 0 <= sample < self.count:
            raise IndexError(f"sample {sample} of {self.count}")
        if self._mapped is None or self._mapped[0] != sample:
            arrays = TokenArrays.open(sample_directory(self.directory, sample))
            arrays.docs, arrays.doc_problem = self.train.docs, self.train.doc_problem
            self._mapped = sample, arrays
        return self._mapped[1]


def epoch_sample(epoch: int, samples: int) -> int:
    """The sample epoch `epoch` (from 0) trains on: a function of the epoch alone, so that a
    resumed run reads what the uninterrupted one did."""
    return epoch % samples
