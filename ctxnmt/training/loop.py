"""The training loop, written once for the translation model (ctxnmt.training.trainer) and
the language model (ctxnmt.lm.train): epochs of updates, budgets, validation and early
stopping, checkpoints, stopping on a signal, and exact resume.

A trainer subclasses TrainingLoop and says what its parts are: an epoch's units of work
and an update on one, its log line, a validation, a checkpoint and the record of a
finished run (the abstract methods below).  The order in which they happen is decided
here, once:

    resumed where a validation was due: validate first
    for each unit of the epoch, from where the run stopped last:
        update; a non-finite loss stops the run
        count it; the progress bar, and a log line every `log_every` updates
        a signal: stop, and leave a validation due here to the resumed run
        every `valid_every` updates, or where a budget is reached: validate, keep best.pt,
            perhaps stop early; else every `checkpoint_every` updates: save last.pt
    at an epoch's end: a budget reached is validated and stops the run
    last.pt, whatever stopped the run

Only scheduled validations (every `valid_every` updates) move the learning-rate schedule
and the patience counter: an extra validation where a run happens to stop must not change
its future, or resuming would not equal an uninterrupted run.  Decisions are taken on
figures summed over the ranks (ctxnmt.training.distributed), so every rank takes the same.
SIGINT and SIGTERM stop training at the next update boundary with last.pt saved.
"""
from __future__ import annotations

import json
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from ctxnmt.errors import DataError
from ctxnmt.models.migrations import DEFINITIONS
from ctxnmt.training.budget import budget_reached
from ctxnmt.training.distributed import LAUNCHER_PID, PeerFailure, World
from ctxnmt.training.log import TrainingLog, score_text
from ctxnmt.training.optim import PlateauSchedule, plateau_stop
from ctxnmt.training.progress import progress
from ctxnmt.utils.io import atomic_write, make_directory
from ctxnmt.utils.lock import TrainingLock
from ctxnmt.utils.preemption import Preempted, StopSignals, agreed_stop, stop_votes
from ctxnmt.utils.threads import setup_threads


@dataclass(frozen=True)
class Stop:
    """Why training ended: `reason` as done.json, train.log and the command line state it, and
    the signal that stopped it (0 where a rule of the run did: a budget, early stopping, a
    non-finite loss)."""
    reason: str
    signal: int = 0


def stop_for(reason: str) -> Stop | None:
    """A rule's verdict ("": go on) as a Stop."""
    return Stop(reason) if reason else None


class ProgressRecord(Protocol):
    """What the loop reads and writes of a trainer's progress record, a dataclass that
    checkpoints and done.json hold under each trainer's own field names."""
    epoch: int
    update: int
    elapsed: float  # seconds of training, validation excluded, across resumes
    tokens: int  # target tokens trained on
    stopped: str
    validation_due: bool  # stopped by a signal where a validation was due: it runs first on resume
    position: int  # units of the current epoch already trained on


def position_in(name: str) -> property:
    """A progress record's `position`, kept in its field `name` (the name its files have)."""
    return property(lambda record: getattr(record, name), lambda record, value: setattr(record, name, value))


@dataclass
class Update:
    """One update's figures, summed over the ranks."""
    loss: float  # summed over its target tokens
    tokens: int
    seconds: float  # per rank


@dataclass
class Window:
    """The training loss and target tokens since the last log line.  Checkpoints keep the
    sums, so that a resumed run logs the uninterrupted run's lines; `timed` counts only the
    tokens since `start` (this process), what a rate is measured on."""
    loss: float = 0.0
    tokens: int = 0
    start: float = field(default_factory=time.perf_counter)
    timed: int = 0

    def add(self, update: Update) -> None:
        self.loss += update.loss
        self.tokens += update.tokens
        self.timed += update.tokens

    def state(self) -> list:
        return [self.loss, self.tokens]


def held_training(model_dir: Path) -> list[str]:
    """The records of a training a model directory holds (done.json, checkpoints/last.pt); [] where none."""
    return [name for name in ("done.json", "checkpoints/last.pt") if (Path(model_dir) / name).is_file()]


def check_fresh_start(model_dir: Path) -> None:
    """A fresh start would overwrite the checkpoints (and done.json) of the training already
    in the directory: hours of work lost to a forgotten --resume or a second command."""
    held = held_training(model_dir)
    if held:
        raise DataError(f"{model_dir}: already holds a training ({', '.join(held)}); continue it "
                        "with --resume, or train into another model_dir (or delete that one)")


# The bar of a time budget: seconds of training, and the time left.
MINUTES_BAR = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}s [ETA {remaining}] {postfix}"


class TrainingLoop(ABC):
    # Set by the trainer: its progress record and learning-rate schedule, the dev score that
    # selects best.pt (and its name in an early stop's reason), and how often last.pt is
    # written between validations (0: only at validations).
    progress: ProgressRecord
    schedule: PlateauSchedule
    metric: str = "ppl"
    metric_name: str = "ppl"
    checkpoint_every: int = 0

    def __init__(self, training, model_dir: str | Path, world: World, quiet: bool = False,
                 tensorboard: bool = True, progress_bar: bool = False, resume: bool = False):
        """`training`: the config's training section (budgets, valid_every, log_every, patience,
        seed, threads).  Takes the model directory's lock, refuses to start afresh where a
        training already is (unless `resume`), and seeds torch."""
        self.training = training
        self.world = world
        self.model_dir = Path(model_dir)
        make_directory(self.model_dir)
        self.lock = TrainingLock(self.model_dir).acquire() if world.is_main else None
        self.ckpt_dir = self.model_dir / "checkpoints"
        if not resume:
            self._refuse_to_start_over()
        self.ckpt_dir.mkdir(exist_ok=True)
        self.log = TrainingLog(self.model_dir, tensorboard=tensorboard, quiet=quiet, enabled=world.is_main)
        self.progress_bar = progress_bar and not quiet and world.is_main
        self.window = Window()
        self._validated_at = -1
        setup_threads(training.threads, world.local_size)
        torch.manual_seed(training.seed)

    def _refuse_to_start_over(self) -> None:
        try:
            check_fresh_start(self.model_dir)
        except DataError:
            if self.lock is not None:
                self.lock.release()
            raise

    # -- what a trainer says -----------------------------------------------------------------
    @abstractmethod
    def epoch_units(self, epoch: int) -> Sequence:
        """The units of work of `epoch`, one an update (batches, BPTT segments), in a fixed order."""

    @abstractmethod
    def train_on(self, unit) -> tuple[float, int]:
        """One update on `unit`: this rank's summed loss and target tokens."""

    @abstractmethod
    def log_window(self, window: Window) -> None:
        """The log line of the updates since the last one."""

    @abstractmethod
    def evaluate(self) -> dict[str, float]:
        """The dev scores, logged."""

    @abstractmethod
    def best_so_far(self) -> float | None:
        """The best checkpoint's `metric`."""

    @abstractmethod
    def keep_best(self, scores: dict[str, float]) -> None:
        """Record `scores` as the best checkpoint's."""

    @abstractmethod
    def save(self, *names: str) -> None:
        """Write the checkpoint(s) `names` (best.pt, last.pt); collective: every rank calls it."""

    @abstractmethod
    def record(self) -> dict[str, Any]:
        """done.json of a finished run."""

    def epoch_ended(self) -> None:
        """Called when an epoch's last update is done, before the next epoch starts."""

    # -- the loop ------------------------------------------------------------------------------
    def train(self):
        """Train until a budget, early stopping or a signal; on a signal, save last.pt and raise
        Preempted.  Returns the progress record."""
        try:
            return self._train()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _train(self):
        with StopSignals(announce=self.world.is_main) as signals:  # the final save too: a second signal waits
            try:
                stop = self._run(signals)
            except PeerFailure:
                self.log.close()
                raise
        p = self.progress
        if stop.signal:
            message = f"{stop.reason} at update {p.update}; saved {self.ckpt_dir / 'last.pt'}"
            self._close(f"training {message}")
            raise Preempted(message, stop.signal)
        if self.world.is_main:
            with atomic_write(self.model_dir / "done.json", "w") as fh:
                json.dump({**self.record(), "definitions": DEFINITIONS}, fh, indent=1)
        self._close(f"training stopped: {p.stopped}; {p.update} updates in {p.elapsed / 60:.1f} min, "
                    f"best dev {self.metric} {score_text(self.best_so_far())}")
        return p

    def _close(self, last_line: str) -> None:
        self.log(last_line)
        self.log.close()
        self.world.close()

    def _run(self, signals: StopSignals) -> Stop:
        """Epochs of updates until a stop."""
        bar = self._make_bar()
        stop = self._validate_postponed() or self._budget()
        while stop is None:
            stop = self._train_epoch(signals, bar)
        if bar is not None:
            bar.close()
        self.progress.stopped = stop.reason
        self.save("last.pt")
        return stop

    def _train_epoch(self, signals: StopSignals, bar) -> Stop | None:
        """The rest of the current epoch, then the next one's start (where a budget may stop the run)."""
        p = self.progress
        for unit in self.epoch_units(p.epoch)[p.position:]:
            stop = self._train_update(unit, signals, bar)
            if stop is not None:
                return stop
        p.epoch += 1
        p.position = 0
        self.epoch_ended()
        stop = self._budget()
        if stop is not None:
            self._validate_and_save(scheduled=False)
        return stop

    def _train_update(self, unit, signals: StopSignals, bar) -> Stop | None:
        """One update, and what follows it: a stop, a validation or a checkpoint."""
        update, cause, signum = self._step(unit, signals)
        if not math.isfinite(update.loss):
            self.log(f"update {self.progress.update + 1}: loss is {update.loss}; stopping")
            return Stop("non-finite loss")
        self._count(update)
        self._report(update, bar)
        stop = self._budget()
        if cause:  # save now; a validation due here runs first thing on resume
            self.progress.validation_due = self._validation_scheduled() or stop is not None
            return Stop(f"stopped by {cause}", signum)
        if self._validation_scheduled() or stop is not None:
            return self._validate_and_save(scheduled=self._validation_scheduled()) or stop
        if self.checkpoint_every and self.progress.update % self.checkpoint_every == 0:
            self.save("last.pt")
        return None

    def _step(self, unit, signals: StopSignals) -> tuple[Update, str, int]:
        """Train on `unit`; its figures and the stop signal, both agreed over the ranks."""
        start = time.perf_counter()
        loss, tokens = self.train_on(unit)
        loss, tokens, seconds, *votes = self.world.sum_step(
            [loss, tokens, time.perf_counter() - start, *stop_votes(signals.signum, self._launcher_gone())])
        cause, signum = agreed_stop(votes)
        return Update(loss, int(tokens), seconds / self.world.size), cause, signum

    def _count(self, update: Update) -> None:
        p = self.progress
        p.update += 1
        p.position += 1
        p.tokens += update.tokens
        p.elapsed += update.seconds

    def _report(self, update: Update, bar) -> None:
        """The progress bar, and the log line every `log_every` updates."""
        p = self.progress
        self.window.add(update)
        if bar is not None:  # the figures first: a plain progress line is written by update
            bar.set_postfix_str(f"loss/tok {update.loss / update.tokens:.3f}, "
                                f"{p.tokens / max(p.elapsed, 1e-9):.0f} tok/s", refresh=False)
            bar.update(self._bar_position() - bar.n)
        if p.update % self.training.log_every == 0:
            self.log_window(self.window)
            self.window = Window()

    def _budget(self) -> Stop | None:
        return stop_for(budget_reached(self.training, self.progress))

    def _validation_scheduled(self) -> bool:
        return self.progress.update % self.training.valid_every == 0

    def _launcher_gone(self) -> bool:
        """Under `ctxnmt train --nproc`, a launcher that died without passing a signal on
        (SIGKILL) leaves its ranks to stop as if signalled."""
        launcher = os.environ.get(LAUNCHER_PID)
        return bool(launcher) and os.getppid() != int(launcher)

    # -- validation ----------------------------------------------------------------------------
    def _validate_postponed(self) -> Stop | None:
        """The validation a signal postponed; its verdict may be the stop the uninterrupted run made there."""
        p = self.progress
        if not p.validation_due:
            return None
        p.validation_due = False
        return self._validate_and_save(scheduled=self._validation_scheduled())

    def _validate_and_save(self, scheduled: bool) -> Stop | None:
        """Validate (rank 0), keep the best checkpoint, and say whether to stop early.  The other
        ranks wait for rank 0's verdict and take its schedule (the learning rate may have decayed)."""
        p = self.progress
        if self._validated_at == p.update:  # an epoch can end on a validation update
            return None
        self._validated_at = p.update
        verdict = self._validate(scheduled) if self.world.is_main else None
        verdict = self.world.broadcast(verdict)
        if not self.world.is_main:
            self.schedule.load_state_dict(verdict["schedule"])
            if verdict["best_scores"] is not None:
                self.keep_best(verdict["best_scores"])
        self.save(*(["best.pt"] if verdict["best"] else []), "last.pt")
        return stop_for(verdict["stop"])

    def _validate(self, scheduled: bool) -> dict:
        t = self.training
        scores = self.evaluate()
        value = scores[self.metric]
        if scheduled:
            best = self.schedule.observe(value)
        else:
            best = self.schedule.is_better(value, self.best_so_far())
        if best:
            self.keep_best(scores)
        return {"best": best, "best_scores": scores if best else None, "schedule": self.schedule.state_dict(),
                "stop": plateau_stop(self.schedule, t.patience, t.stop_at_min_lr, self.metric_name)}

    # -- checkpoints and the progress bar -----------------------------------------------------
    def restore_window(self, payload: dict) -> None:
        """The log window a checkpoint kept (none before it was kept: an empty one)."""
        loss, tokens = payload.get("window", (0.0, 0))
        self.window = Window(loss, tokens)

    def _bar_position(self) -> int:
        t, p = self.training, self.progress
        if t.max_minutes:
            return int(p.elapsed)
        return p.update

    def _make_bar(self):
        if not self.progress_bar:
            return None
        t = self.training
        if t.max_minutes:
            return progress(int(60 * t.max_minutes), self._bar_position(), "s", bar_format=MINUTES_BAR)
        return progress(t.max_updates or None, self._bar_position(), "upd")
