"""Language modelling as a task of the Trainer (ctxnmt.training.task): truncated BPTT over
B parallel streams, an update a segment, early stopping on dev perplexity.

The LSTM and summary state at the end of a segment starts the next one; it is part of
the checkpoint, so a resumed run takes the very updates the uninterrupted one would.  That
state holds batch_size streams, and the position in the epoch counts segments of bptt
tokens: a resume with either changed is refused."""
from __future__ import annotations

import math
from pathlib import Path

import torch

from ctxnmt.config import lookup, read_raw
from ctxnmt.errors import CheckpointError
from ctxnmt.lm import data as lm_data
from ctxnmt.lm.config import LMConfig
from ctxnmt.lm.model import ResidualLM, detach
from ctxnmt.lm.scoring import check_trained_as, perplexity
from ctxnmt.training.distributed import World
from ctxnmt.training.log import TrainingLog
from ctxnmt.training.optim import PlateauSchedule
from ctxnmt.training.task import Progress, Task, Window

Segment = tuple[torch.Tensor, torch.Tensor]  # (inputs, targets) of every stream


class LanguageModelTask(Task):
    metric, metric_name = "ppl", "perplexity"
    config: LMConfig
    stream_state = None  # carried into the next segment of the epoch (None: the epoch's start)

    # -- setting up ----------------------------------------------------------------------
    def setup(self, world: World, device: torch.device, log: TrainingLog) -> ResidualLM:
        self.log = log
        d, t = self.config.data, self.training
        train_words = lm_data.read_split(d, "train")
        self.vocab = lm_data.build_vocab(train_words, d)
        self.train_data = lm_data.batchify(lm_data.stream(train_words, self.vocab), t.batch_size,
                                           "training text").to(device)
        self.dev = lm_data.stream(lm_data.read_split(d, "dev"), self.vocab).to(device)
        self.model = ResidualLM(self.config.model, len(self.vocab))
        return self.model

    def schedule(self) -> PlateauSchedule:
        t = self.training
        return PlateauSchedule(t.lr, 0, t.lr_decay, t.lr_patience, t.min_lr, higher_is_better=False)

    def describe(self) -> str:
        n_params = sum(p.numel() for p in self.model.parameters())
        return (f"LM: {n_params:,} parameters ({self.config.model.summary} summary), vocabulary {len(self.vocab)}, "
                f"{self.train_data.numel():,} training tokens in {self.training.batch_size} streams")

    # -- training ------------------------------------------------------------------------
    def epoch_units(self, epoch: int, starting: bool) -> list[Segment]:
        """The segments of the training streams, in order: every epoch reads the text from its start."""
        if starting:
            self.stream_state = None
        return list(lm_data.segments(self.train_data, self.training.bptt))

    def backward(self, segment: Segment, update: int) -> tuple[float, int]:
        """The loss averaged over the segment's tokens (in float32: no loss scale); the state after
        it goes on into the next segment."""
        tokens, targets = segment
        state = self.stream_state or self.model.initial_state(self.training.batch_size)
        nll, state = self.model.loss(tokens, targets, state)
        (nll / targets.numel()).backward()
        self.stream_state = detach(state)
        return float(nll.detach()), targets.numel()

    def log_window(self, window: Window, progress: Progress, lr: float) -> None:
        self.log(f"update {progress.update}: train ppl {math.exp(window.loss / window.tokens):.2f}, "
                 f"lr {lr:.2e}, {progress.elapsed / 60:.1f} min")

    def evaluate(self, progress: Progress) -> dict[str, float]:
        ppl = perplexity(self.model, self.dev)
        self.log(f"validation at update {progress.update}: dev ppl {ppl:.2f}")
        return {"ppl": ppl}

    # -- checkpoints and files -----------------------------------------------------------
    def state(self) -> dict:
        return {"vocab": self.vocab.fingerprint(), "stream_state": self.stream_state}

    def check(self, payload: dict, path: Path) -> None:
        """Another vocabulary or model (ctxnmt.lm.scoring), or other streams than the checkpoint's:
        the saved state and the epoch's position count streams of batch_size and segments of bptt
        tokens; with others they point elsewhere, or do not fit."""
        saved = self.model_dir / "config.yaml"
        check_trained_as(payload, path, self.config, self.vocab, saved)
        if not saved.is_file():
            return
        trained = read_raw(saved)
        for key in ("batch_size", "bptt"):
            was, now = lookup(trained, f"training.{key}"), getattr(self.training, key)
            if was is not None and was != now:
                raise CheckpointError(f"{path}: was trained with training.{key} {was} ({saved}), not {now}; "
                                      f"resume with the same, or train afresh in another model_dir")

    def load_state(self, payload: dict) -> None:
        self.stream_state = payload["stream_state"]

    def write_files(self) -> None:
        self.vocab.save(self.model_dir / "vocab.txt")
