"""The `training` section: the loop's settings (`LoopConfig`, which the Trainer reads for every
task, the language model's too) and translation's own (`TrainingConfig`).  Each declared once,
here, with its default, values and help (ctxnmt.utils.options); torch-free, so that reading a
config loads no model code."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ctxnmt.errors import ConfigError
from ctxnmt.utils.options import option

DEVICE = re.compile(r"cpu|cuda(:\d+)?")
# The document context's settings check the last condition (a sentence-level model).
CUDA_GRAPHS_NEED = ("training.cuda_graphs needs training.device cuda (got '{device}'), precision fp32 "
                    "or bf16 (got '{precision}') and a sentence-level model")


@dataclass
class LoopConfig:
    """What the Trainer (ctxnmt.training.trainer) and its plateau schedule read, in any task."""
    optimizer: str = option("adam", ("adam", "adadelta"))
    lr: float = option(1e-3, ">0")
    clip_norm: float = option(1.0, ">=0", "the gradient's norm is clipped to this; 0 = off")
    max_updates: int = option(0, ">=0", "0 = unlimited")
    max_epochs: int = option(0, ">=0", "0 = unlimited")
    max_minutes: float = option(0.0, ">=0", "wall-clock budget for the training loop; 0 = unlimited")
    valid_every: int = option(500, ">=1", "updates between validations")
    patience: int = option(10, ">=0", "validations without improvement before stopping; 0 = never stop early")
    lr_decay: float = option(0.5, "(0,1]", "factor applied when the metric plateaus; 1.0 = off")
    lr_patience: int = option(3, ">=0")
    min_lr: float = option(1e-5, ">=0")
    stop_at_min_lr: bool = option(False, help="stop once lr_decay has brought the learning rate down to min_lr")
    seed: int = 1234
    threads: int = option(0, ">=0", "0 = OMP_NUM_THREADS where set, else every core the process may run on")
    log_every: int = option(50, ">=1")
    device: str = option("cpu", help="cpu | cuda | cuda:N; a distributed run on cuda gives each local rank its GPU")
    checkpoint_every: int = option(0, ">=0", "updates between writes of last.pt, independent of validation; "
                                             "0 = at validation only")
    keep_checkpoints: int = option(0, ">=0", "the weights at each of the last N writes of last.pt before the end "
                                             "(checkpoints/update-U.pt), for `ctxnmt average`; 0 = none")

    def check(self, config) -> None:
        """The rules across keys; `config` is the whole config the section is in."""
        if not DEVICE.fullmatch(self.device):
            raise ConfigError(f"training.device must be 'cpu', 'cuda' or 'cuda:N', got '{self.device}'")


@dataclass
class TrainingConfig(LoopConfig):
    """Translation's training: its batches, validation, precision and document-context training."""
    warmup_updates: int = option(0, ">=0")
    label_smoothing: float = option(0.0, "[0,1)")
    batch_tokens: int = option(2600, ">=1", "target-token budget per batch")
    batch_sents: int = option(80, ">=1", "sentence cap per batch")
    valid_bleu: bool = True
    valid_beam: int = option(5, ">=1")
    valid_max_sents: int = option(0, ">=0", "0 = the whole dev set")
    early_stop_metric: str = option("bleu", ("bleu", "ppl"))
    # Ours: the last cooldown_updates of max_updates take the learning rate linearly to zero.
    cooldown_updates: int = option(0, help="0 = off; otherwise at most max_updates (checked with it)")
    precision: str = option("fp32", ("fp32", "bf16", "fp16"),
                            "autocast for the training forward pass (docs/distributed.md)")
    # Ours: each training step's forward and backward pass replayed from a CUDA
    # graph, one per padded batch shape (ctxnmt/training/graphs.py, docs/speed.md).
    cuda_graphs: bool = False
    # Whose previous sentences a document model trains on: its own document's, or (a control
    # that keeps the amount of context and removes its information) another document's,
    # drawn once with the seed.  Validation and translation always read the own document.
    document_context: str = option("own", ("own", "other-document"))
    # fixed: every training sentence reads all its previous sentences (up to K), as the papers
    # train; random: as many as a uniform draw from 0 … K allows, anew each update (context
    # dropout, Fernandes et al. 2021), so that an empty context is in the model's distribution
    context_size: str = option("fixed", ("fixed", "random"))
    # CoWord dropout (Fernandes et al. 2021): each word of the current source sentence becomes
    # the unknown word with this probability in training, so that the model must read its context
    coword_dropout: float = option(0.0, "[0,1)")

    @property
    def selection_metric(self) -> str:
        """The dev metric that early stopping, the learning-rate schedule and best.pt follow:
        early_stop_metric, except that without dev BLEU (valid_bleu false) it is perplexity."""
        return "ppl" if self.early_stop_metric == "bleu" and not self.valid_bleu else self.early_stop_metric

    def check(self, config) -> None:
        super().check(config)
        if self.cooldown_updates and not 0 < self.cooldown_updates <= self.max_updates:
            raise ConfigError(f"training.cooldown_updates needs training.max_updates of at least as many updates, "
                              f"got {self.cooldown_updates} with max_updates {self.max_updates}")
        if self.cuda_graphs and (not self.device.startswith("cuda") or self.precision == "fp16"):
            raise ConfigError(CUDA_GRAPHS_NEED.format(device=self.device, precision=self.precision))
