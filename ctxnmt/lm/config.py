"""The language model's typed config: its own small schema, loaded and checked with the
translation config's helpers (same errors for unknown keys and wrong types)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from typing import ClassVar

from ctxnmt.config import ComponentSection, build_typed, check_ranges, naming_the_file, read_raw, validate_loop
from ctxnmt.errors import ConfigError
from ctxnmt.models.registry import TARGET_CONTEXTS

# The LM section's names that the decoder's registry spells otherwise: its self-attentive
# summary sums over the words (eqs. 12–13), the decoder's follows the released code and keeps
# the start symbol (ctxnmt.models.target_context)
REGISTERED_AS = {"self-attentive": "self-attentive-words", "self-attentive-with-start": "self-attentive"}
NO_SUMMARY = "none"  # the papers' LSTM baseline: no d_t
# The summaries of the papers' LM experiments and ours (the -with-start forms), as the shipped
# configs name them; any target context that reads only the words trains as well.
SUMMARIES = (NO_SUMMARY, "previous", "mean", "mean-with-start", "self-attentive", "self-attentive-with-start")


@dataclass
class LMDataConfig:
    """A monolingual corpus: {dir}/{train}.{lang}, likewise dev and test, one sentence a line."""

    dir: str = "data/bible"
    lang: str = "en"
    train: str = "train"
    dev: str = "dev"
    test: str = "test"
    tokenize: bool = True  # Moses tokeniser (as for translation)
    lowercase: bool = True  # PTB-style: a 10k vocabulary should not spend entries on case variants
    vocab_size: int = 10000  # most frequent training words; the rest become <unk>


@dataclass(eq=False)
class LMModelConfig(ComponentSection):
    NAMES: ClassVar[dict[str, str]] = {"target_context": "summary"}
    # none, or a target context of the translation decoder's registry that reads only the
    # words (previous, mean, mean-with-start, self-attentive, self-attentive-with-start, …),
    # with its settings as keys of this section
    summary: str = "previous"
    emb_dim: int = 150
    hidden_dim: int = 300
    layers: int = 1
    tie_embeddings: bool = True  # Press & Wolf: the softmax layer is the input embedding matrix
    dropout: float = 0.5  # on the embeddings, the LSTM output and g(s_t, d_t)


@dataclass
class LMTrainingConfig:
    optimizer: str = "adam"  # adam | adadelta
    lr: float = 1e-3
    clip_norm: float = 1.0
    batch_size: int = 20  # parallel streams
    bptt: int = 35  # tokens per truncated-BPTT segment
    max_updates: int = 0  # 0 = unlimited
    max_epochs: int = 0  # 0 = unlimited
    max_minutes: float = 0.0  # training time (validation excluded); 0 = unlimited
    valid_every: int = 500  # updates between dev perplexities
    patience: int = 5  # validations without improvement before stopping; 0 = never
    lr_decay: float = 0.5  # applied when dev perplexity plateaus; 1.0 = off
    lr_patience: int = 1
    min_lr: float = 1e-5
    stop_at_min_lr: bool = False  # stop once lr_decay has brought the learning rate down to min_lr
    seed: int = 1234
    threads: int = 0  # 0 = all cores
    log_every: int = 100
    checkpoint_every: int = 0  # updates between writes of last.pt, independent of validation; 0 = at validation only
    keep_checkpoints: int = 0  # the weights at each of the last N writes of last.pt (`ctxnmt average`); 0 = none
    device: str = "cpu"


@dataclass
class LMConfig:
    name: str = "lm"
    model_dir: str = "runs/lm"
    data: LMDataConfig = field(default_factory=LMDataConfig)
    model: LMModelConfig = field(default_factory=LMModelConfig)
    training: LMTrainingConfig = field(default_factory=LMTrainingConfig)


def load_lm_config(path: str | Path | None, overrides: list[str] | None = None) -> LMConfig:
    raw = read_raw(path, overrides)
    with naming_the_file(path, overrides):
        config = build_typed(LMConfig, raw)
        validate(config)
    return config


# The language model's own fields' ranges, beyond the training loop's (config.LOOP_RANGES).
LM_RANGES = {"model": {"emb_dim": ">=1", "hidden_dim": ">=1", "layers": ">=1", "dropout": "[0,1)"},
             "training": {"batch_size": ">=1", "bptt": ">=1"}, "data": {"vocab_size": ">=1"}}


def registered_name(summary: str) -> str:
    """The name a summary is registered under in TARGET_CONTEXTS."""
    return REGISTERED_AS.get(summary, summary)


def validate(config: LMConfig) -> None:
    m, t = config.model, config.training
    if m.summary != NO_SUMMARY and TARGET_CONTEXTS.get(registered_name(m.summary), "model.summary").reads_decoder:
        raise ConfigError(f"model.summary '{m.summary}' reads the decoder's state or context vector, "
                          "which a language model has not")
    for name, ranges in LM_RANGES.items():
        check_ranges(getattr(config, name), name, ranges)
    if t.optimizer not in ("adam", "adadelta"):
        raise ConfigError(f"training.optimizer must be 'adam' or 'adadelta', got '{t.optimizer}'")
    validate_loop(t)
