"""Text to one continuous token stream, and the stream to truncated-BPTT segments (PTB setup).

The stream is </s> w_1 … w_n </s> w_1 … : each line's words followed by </s>, with
one </s> in front so that the first word of the text is predicted too.  The
</s> before a sentence plays the part of the start symbol y_0 for its summary.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from ctxnmt.data.corpus import read_lines
from ctxnmt.data.preprocess import moses_words
from ctxnmt.data.vocab import EOS, Vocab
from ctxnmt.errors import DataError
from ctxnmt.lm.config import LMDataConfig


def words(lines: Sequence[str], cfg: LMDataConfig) -> list[list[str]]:
    if cfg.lowercase:
        lines = [line.lower() for line in lines]
    return moses_words(lines, cfg.lang) if cfg.tokenize else [line.split() for line in lines]


def build_vocab(word_lists: Sequence[Sequence[str]], cfg: LMDataConfig) -> Vocab:
    return Vocab.build(word_lists, max_size=cfg.vocab_size)


def stream(word_lists: Sequence[Sequence[str]], vocab: Vocab) -> torch.Tensor:
    ids = [EOS]
    for line in word_lists:
        ids.extend(vocab.encode(line))
    return torch.tensor(ids, dtype=torch.long)


def read_split(cfg: LMDataConfig, split: str) -> list[list[str]]:
    return words(read_lines(Path(cfg.dir) / f"{getattr(cfg, split)}.{cfg.lang}"), cfg)


def batchify(ids: torch.Tensor, streams: int, name: str = "the text") -> torch.Tensor:
    """(streams, N) contiguous parallel streams; the remainder of the division is dropped."""
    length = ids.numel() // streams
    if length < 2:
        raise DataError(f"{name}: {ids.numel()} tokens are too few for {streams} streams of at least 2 tokens")
    return ids[: streams * length].view(streams, length)


def segments(data: torch.Tensor, bptt: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, targets) windows of up to `bptt` tokens; targets are the inputs shifted by one."""
    for start in range(0, data.size(1) - 1, bptt):
        end = min(start + bptt, data.size(1) - 1)
        yield data[:, start:end], data[:, start + 1: end + 1]
