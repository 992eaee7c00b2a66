"""Training the residual LM: truncated BPTT over B parallel streams, dev perplexity,
early stopping, time and update budgets, atomic checkpoints, exact resume.

last.pt is written at every validation and at the end, with everything a resumed run
needs to take the very updates the uninterrupted one would: the optimiser, the learning
rate schedule, the random generators, the position in the epoch and the stream state
carried into the next segment."""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ctxnmt.config import save_config
from ctxnmt.errors import CheckpointError
from ctxnmt.lm import data as lm_data
from ctxnmt.lm.config import LMConfig
from ctxnmt.lm.model import ResidualLM, detach
from ctxnmt.lm.scoring import perplexity
from ctxnmt.training.budget import budget_reached
from ctxnmt.utils.checkpoint import load_checkpoint, save_checkpoint
from ctxnmt.training.distributed import rng_state, set_rng_state
from ctxnmt.training.optim import PlateauSchedule, build_optimizer, plateau_stop, set_lr
from ctxnmt.utils.preemption import Preempted, StopSignals
from ctxnmt.training.trainer import Logger
from ctxnmt.utils.threads import setup_threads
from ctxnmt.utils.io import atomic_write
from ctxnmt.utils.lock import TrainingLock


@dataclass
class LMProgress:
    epoch: int = 0
    update: int = 0
    elapsed: float = 0.0
    best_ppl: float | None = None
    stopped: str = ""
    segment: int = 0  # segments of the current epoch already trained on


class LMTrainer:
    def __init__(self, config: LMConfig, resume: bool = False, quiet: bool = False):
        self.config = config
        t = config.training
        self.model_dir = Path(config.model_dir)
        (self.model_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        self.lock = TrainingLock(self.model_dir).acquire()
        self.log = Logger(self.model_dir, tensorboard=False, quiet=quiet)
        setup_threads(t.threads)
        torch.manual_seed(t.seed)
        self.device = torch.device(t.device)
        train_words = lm_data.read_split(config.data, "train")
        self.vocab = lm_data.build_vocab(train_words, config.data)
        self.vocab.save(self.model_dir / "vocab.txt")
        self.train_data = lm_data.batchify(lm_data.stream(train_words, self.vocab), t.batch_size,
                                           "training text").to(self.device)
        self.dev = lm_data.stream(lm_data.read_split(config.data, "dev"), self.vocab).to(self.device)
        save_config(config, self.model_dir / "config.yaml")
        self.model = ResidualLM(config.model, len(self.vocab)).to(self.device)
        self.optimizer = build_optimizer(self.model.parameters(), t)
        self.schedule = PlateauSchedule(t.lr, 0, t.lr_decay, t.lr_patience, t.min_lr, higher_is_better=False)
        self.progress = LMProgress()
        self.stream_state = None  # carried into the next segment of the epoch (None: the epoch's start)
        self.window = [0.0, 0]  # training NLL and tokens since the last log line
        n_params = sum(p.numel() for p in self.model.parameters())
        self.log(f"LM: {n_params:,} parameters ({config.model.summary} summary), vocabulary {len(self.vocab)}, "
                 f"{self.train_data.numel():,} training tokens in {t.batch_size} streams")
        if resume:
            self._restore(self.model_dir / "checkpoints" / "last.pt")

    def _limit(self) -> str:
        return budget_reached(self.config.training, self.progress)

    def _update(self, tokens, targets, state):
        t = self.config.training
        self.model.train()
        set_lr(self.optimizer, self.schedule.lr(self.progress.update))
        self.optimizer.zero_grad(set_to_none=True)
        nll, state = self.model.loss(tokens, targets, state)
        (nll / targets.numel()).backward()
        if t.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
        self.optimizer.step()
        return float(nll.detach()), detach(state)

    def train(self) -> LMProgress:
        try:
            return self._train()
        finally:
            self.lock.release()

    def _train(self) -> LMProgress:
        p = self.progress
        with StopSignals() as signals:  # the save too: a repeated signal must not interrupt it
            self._loop(signals)
            self._save_last()
        if signals.signum and p.stopped.startswith("stopped by "):
            message = f"{p.stopped} at update {p.update}; saved {self.model_dir / 'checkpoints' / 'last.pt'}"
            self.log(f"training {message}")
            raise Preempted(message, signals.signum)
        with atomic_write(self.model_dir / "done.json", "w") as fh:
            json.dump(asdict(p), fh, indent=1)
        self.log(f"training stopped: {p.stopped}; {p.update} updates in {p.elapsed / 60:.1f} min, "
                 f"best dev ppl {p.best_ppl}")
        return p

    def _loop(self, signals: StopSignals) -> None:
        """Update until a budget, early stopping or a signal.  A signal is looked at after
        an update's validation, so the run stops where last.pt is consistent."""
        t, p = self.config.training, self.progress
        stop = self._limit()
        while not stop:
            state = self.stream_state or self.model.initial_state(t.batch_size)  # an epoch starts at the text's start
            for index, (tokens, targets) in enumerate(lm_data.segments(self.train_data, t.bptt)):
                if index < p.segment:  # trained on before the run was resumed
                    continue
                stop = self._step(tokens, targets, state) or (f"stopped by {signals.name}" if signals.signum else "")
                state = self.stream_state
                if stop:
                    break
            else:
                p.epoch, p.segment, self.stream_state = p.epoch + 1, 0, None
                stop = self._limit()
                if stop:
                    self._validate(scheduled=False)
        p.stopped = p.stopped or stop

    def _step(self, tokens, targets, state) -> str:
        """One update on one segment, its log line and validation; the reason to stop, if any."""
        t, p = self.config.training, self.progress
        start = time.perf_counter()
        nll, self.stream_state = self._update(tokens, targets, state)
        p.elapsed += time.perf_counter() - start
        p.update, p.segment = p.update + 1, p.segment + 1
        if not math.isfinite(nll):
            p.stopped = "non-finite loss"
            return p.stopped
        self.window = [self.window[0] + nll, self.window[1] + targets.numel()]
        if p.update % t.log_every == 0:
            self.log(f"update {p.update}: train ppl {math.exp(self.window[0] / self.window[1]):.2f}, "
                     f"lr {self.schedule.lr(p.update):.2e}, {p.elapsed / 60:.1f} min")
            self.window = [0.0, 0]
        stop = self._limit()
        if p.update % t.valid_every == 0 or stop:
            stop = self._validate(scheduled=p.update % t.valid_every == 0) or stop
            if not stop:
                self._save_last()  # the point a resumed run continues from
        return stop

    def _validate(self, scheduled: bool) -> str:
        p, t = self.progress, self.config.training
        ppl = perplexity(self.model, self.dev)
        self.log(f"validation at update {p.update}: dev ppl {ppl:.2f}")
        if self.schedule.observe(ppl) if scheduled else self.schedule.is_better(ppl, p.best_ppl):
            p.best_ppl = ppl
            self._save("best.pt")
        return plateau_stop(self.schedule, t.patience, t.stop_at_min_lr, "perplexity")

    def _save(self, name: str, **extra) -> None:
        save_checkpoint(self.model_dir / "checkpoints" / name, {
            "model": self.model.state_dict(),
            "model_config": asdict(self.config.model),
            "vocab": self.vocab.fingerprint(),
            "progress": asdict(self.progress),
            **extra,
        })

    def _save_last(self) -> None:
        self._save("last.pt", optimizer=self.optimizer.state_dict(), schedule=self.schedule.state_dict(),
                   rng=rng_state(self.device), stream_state=self.stream_state, window=self.window)

    def _restore(self, path: Path) -> None:
        payload = load_checkpoint(path)
        if "optimizer" not in payload:
            raise CheckpointError(f"{path}: holds no training state to resume from")
        if payload.get("vocab") != self.vocab.fingerprint() or payload.get("model_config") != asdict(self.config.model):
            raise CheckpointError(f"{path}: was trained with another model config or vocabulary than {self.model_dir}")
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.schedule.load_state_dict(payload["schedule"])
        self.progress = LMProgress(**{**payload["progress"], "stopped": ""})  # a new budget may let it go on
        self.stream_state = payload["stream_state"]
        self.window = list(payload["window"])
        set_rng_state(payload["rng"], self.device)
        self.log(f"resumed from {path} at update {self.progress.update} (epoch {self.progress.epoch + 1})")
