"""The language model's typed config: its own small schema, loaded and checked by the
translation config's loader (the same errors for unknown keys and wrong types)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ctxnmt.config import LANGUAGE_MODEL, from_dict, load_config
from ctxnmt.models.settings import ComponentSection
from ctxnmt.training.settings import LoopConfig
from ctxnmt.utils.options import Section, option, redefault

# The LM section's names that the decoder's registry spells otherwise: its self-attentive
# summary sums over the words (eqs. 12–13), the decoder's follows the released code and keeps
# the start symbol (ctxnmt.models.target_context)
REGISTERED_AS = {"self-attentive": "self-attentive-words", "self-attentive-with-start": "self-attentive"}
NO_SUMMARY = "none"  # the papers' LSTM baseline: no d_t
# The summaries of the papers' LM experiments and ours (the -with-start forms), as the shipped
# configs name them; any target context that reads only the words trains as well.
SUMMARIES = (NO_SUMMARY, "previous", "mean", "mean-with-start", "self-attentive", "self-attentive-with-start")


@dataclass
class LMDataConfig(Section):
    """A monolingual corpus: {dir}/{train}.{lang}, likewise dev and test, one sentence a line."""

    dir: str = "data/bible"
    lang: str = "en"
    train: str = "train"
    dev: str = "dev"
    test: str = "test"
    tokenize: bool = option(True, help="Moses tokeniser (as for translation)")
    lowercase: bool = option(True, help="PTB-style: a 10k vocabulary should not spend entries on case variants")
    vocab_size: int = option(10000, ">=1", "most frequent training words; the rest become <unk>")


@dataclass(eq=False)
class LMModelConfig(ComponentSection):
    NAMES: ClassVar[dict[str, str]] = {"target_context": "summary"}
    # none, or a target context of the translation decoder's registry that reads only the
    # words (previous, mean, mean-with-start, self-attentive, self-attentive-with-start, …),
    # with its settings as keys of this section
    summary: str = "previous"
    emb_dim: int = option(150, ">=1")
    hidden_dim: int = option(300, ">=1")
    layers: int = option(1, ">=1")
    tie_embeddings: bool = option(True, help="Press & Wolf: the softmax layer is the input embedding matrix")
    dropout: float = option(0.5, "[0,1)", "on the embeddings, the LSTM output and g(s_t, d_t)")


@dataclass
class LMTrainingConfig(LoopConfig):
    """The training loop's settings (ctxnmt.training.settings), three with the LM's own defaults,
    and the streams of truncated BPTT."""
    patience: int = redefault(LoopConfig, "patience", 5)
    lr_patience: int = redefault(LoopConfig, "lr_patience", 1)
    log_every: int = redefault(LoopConfig, "log_every", 100)
    batch_size: int = option(20, ">=1", "parallel streams")
    bptt: int = option(35, ">=1", "tokens per truncated-BPTT segment")


@dataclass
class LMConfig:
    task: str = LANGUAGE_MODEL
    name: str = "lm"
    model_dir: str = "runs/lm"
    data: LMDataConfig = field(default_factory=LMDataConfig)
    model: LMModelConfig = field(default_factory=LMModelConfig)
    training: LMTrainingConfig = field(default_factory=LMTrainingConfig)


def load_lm_config(path: str | Path | None, overrides: list[str] | None = None) -> LMConfig:
    return load_config(path, overrides, LMConfig)


def lm_from_dict(raw: dict) -> LMConfig:
    """The checked LM config of a raw mapping: a file's, or a model directory's saved config.yaml."""
    return from_dict(raw, LMConfig)


def registered_name(summary: str) -> str:
    """The name a summary is registered under in TARGET_CONTEXTS."""
    return REGISTERED_AS.get(summary, summary)
