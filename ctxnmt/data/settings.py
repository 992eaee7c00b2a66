"""The `data` section: where the corpus is and how text becomes subword ids.  Declared once,
here, with each setting's default, values and help (ctxnmt.utils.options); torch-free, so that
reading a config loads no model code."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ctxnmt.errors import ConfigError
from ctxnmt.utils.options import option

LANGUAGE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]+)?")
# The keys that decide what the text pipeline does (ctxnmt.data.preprocess): a prepared
# directory's preprocess.json records them, in this order.
PIPELINE_KEYS = ("src_lang", "tgt_lang", "tokenize", "truecase", "bpe_merges", "joint_bpe", "subwords",
                 "sentencepiece_vocab", "sentencepiece_type")


@dataclass
class DataConfig:
    corpus: str = option("bible", ("bible", "files"),
                         "bible builds the default corpus into `dir`; files uses the paths below")
    dir: str = "data/bible"
    src_lang: str = "es"
    tgt_lang: str = "en"
    train: str = "train"  # file prefixes inside `dir`: {dir}/{train}.{src_lang}
    dev: str = "dev"
    test: str = "test"
    tokenize: bool = True
    truecase: bool = True
    bpe_merges: int = option(8000, ">=0", "subword-nmt merges (subwords: bpe); 0 = whole words")
    joint_bpe: bool = option(True, help="one subword model on both sides (BPE's or SentencePiece's), else one per side")
    subwords: str = option("bpe", ("bpe", "sentencepiece"),
                           "bpe (subword-nmt) | sentencepiece (bpe_merges is then ignored)")
    sentencepiece_vocab: int = option(8000, ">=1", "pieces of the SentencePiece model (at most: a small corpus "
                                                   "may give fewer)")
    sentencepiece_type: str = option("unigram", ("unigram", "bpe"), "SentencePiece's training algorithm")
    vocab_size: int = option(0, ">=0", "0 = every subword seen in training")
    max_len: int = option(80, ">=1", "subword tokens; longer training pairs are dropped (and counted)")
    # Cleaning of the training pairs, each off by default (the papers' data came cleaned):
    filter_ratio: float = option(0.0, ">=0", "drop pairs whose word counts differ by more than this factor "
                                             "(Moses clean-corpus-n: 9)")
    filter_duplicates: bool = option(False, help="drop a pair that occurred before")
    filter_identical: bool = option(False, help="drop a pair whose source and target are the same text")
    # Subword regularisation of the training pairs only (ctxnmt.data.sampling), 0 = off:
    bpe_dropout: float = option(0.0, "[0,1)", "BPE-dropout (Provilkov et al. 2020): each merge skipped with "
                                              "this probability")
    sentencepiece_alpha: float = option(0.0, ">=0", "SentencePiece sampling (Kudo 2018): its alpha, "
                                                    "all segmentations")
    subword_samples: int = option(8, ">=1", "sampled segmentations written at prepare; epoch e trains on sample "
                                            "e mod this")

    def pipeline(self) -> dict[str, Any]:
        """The settings the text pipeline follows, as preprocess.json records them."""
        return {key: getattr(self, key) for key in PIPELINE_KEYS}

    def lang(self, side: str) -> str:
        return self.src_lang if side == "src" else self.tgt_lang

    def check(self, config) -> None:
        """Language codes (they name the files and choose the tokeniser's rules); each scheme's own
        regularisation: a probability set for the other scheme would be silently unused."""
        for key in ("src_lang", "tgt_lang"):
            if not LANGUAGE.fullmatch(getattr(self, key)):
                raise ConfigError(f"data.{key} must be a language code such as 'en', not {getattr(self, key)!r}",
                                  key=f"data.{key}")
        if self.bpe_dropout and self.subwords != "bpe":
            raise ConfigError(f"data.bpe_dropout is for subwords: bpe, not {self.subwords}; SentencePiece samples "
                              "with data.sentencepiece_alpha", key="data.bpe_dropout")
        if self.bpe_dropout and not self.bpe_merges:
            raise ConfigError("data.bpe_dropout needs BPE merges to drop: data.bpe_merges is 0 (whole words)",
                              key="data.bpe_dropout")
        if self.sentencepiece_alpha and self.subwords != "sentencepiece":
            raise ConfigError(f"data.sentencepiece_alpha is for subwords: sentencepiece, not {self.subwords}; BPE "
                              "samples with data.bpe_dropout", key="data.sentencepiece_alpha")
        if self.sentencepiece_alpha >= 1 and self.sentencepiece_type == "bpe":
            # SentencePiece's BPE reads alpha as the probability of dropping a merge: 1 leaves characters alone
            raise ConfigError("data.sentencepiece_alpha must be in [0, 1) with sentencepiece_type bpe (it is the "
                              f"probability of dropping a merge), got {self.sentencepiece_alpha}",
                              key="data.sentencepiece_alpha")
