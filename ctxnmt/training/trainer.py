"""The Trainer: one training loop and one checkpoint layout for every task (ctxnmt.training.task:
translation, language modelling).  It owns the ranks, the device, the optimiser, the
learning-rate schedule, the precision, the progress record, the checkpoints and exact
resume; the task supplies the data, the model, the units of an epoch and their loss, and
the dev scores.  The order in which things happen is decided here, once:

    resumed where a validation was due: validate first
    for each unit of the epoch, from where the run stopped last:
        update; a non-finite loss stops the run
        count it; the progress bar, and a log line every `log_every` updates
        a signal: stop, and leave a validation due here to the resumed run
        every `valid_every` updates, or where a budget is reached: validate, keep best.pt,
            perhaps stop early; else every `checkpoint_every` updates: save last.pt (both
            also keep the weights as update-U.pt where `keep_checkpoints` asks: averaging.py)
    at an epoch's end: a budget reached is validated and stops the run
    last.pt, whatever stopped the run

Only scheduled validations (every `valid_every` updates) move the learning-rate schedule
and the patience counter: an extra validation where a run happens to stop must not change
its future, or resuming would not equal an uninterrupted run.  Resume is exact because
everything that decides the future of a run is in the checkpoint: parameters, optimiser
moments, the schedule, the loss scale (fp16), every rank's RNGs (dropout), the position in
the epoch (a task's units are a pure function of seed and epoch), the log window, and what
the task carries from unit to unit.  On several ranks (ctxnmt.training.distributed) each
update's unit is dealt to the ranks; decisions are taken on figures summed over the ranks,
validation, logging and checkpoint files are rank 0's, and the other ranks wait for its
verdict.  SIGINT and SIGTERM stop training at the next update boundary with last.pt saved.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ctxnmt.config import config_dict, save_config
from ctxnmt.errors import CheckpointError, DataError
from ctxnmt.models.migrations import DEFINITIONS, load_model_checkpoint, save_model_checkpoint
from ctxnmt.training.averaging import kept_name, prune_kept
from ctxnmt.training.budget import budget_reached
from ctxnmt.training.distributed import (LAUNCHER_PID, PeerFailure, World, device_for, init_world, rank_seed,
                                         rng_state, set_rng_state)
from ctxnmt.training.log import TrainingLog, score_text
from ctxnmt.training.optim import build_optimizer, plateau_stop, set_lr
from ctxnmt.training.precision import Precision
from ctxnmt.training.progress import progress
from ctxnmt.training.task import Progress, Task, Window
from ctxnmt.utils.checkpoint import load_model_state, weights_only
from ctxnmt.utils.io import atomic_write, make_directory
from ctxnmt.utils.lock import TrainingLock
from ctxnmt.utils.preemption import Preempted, StopSignals, agreed_stop, stop_votes
from ctxnmt.utils.revision import source_revision
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


@dataclass
class Update:
    """One update's figures, summed over the ranks."""
    loss: float  # summed over its target tokens
    tokens: int
    seconds: float  # per rank


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


class Trainer:
    def __init__(self, task: Task, resume: bool = False, quiet: bool = False, progress_bar: bool = True):
        """Takes the model directory's lock, refuses to start afresh where a training already
        is (unless `resume`), seeds torch, has the task load its data and build its model, and
        restores last.pt when resuming."""
        self.task = task
        t = self.training = task.training
        self.world = init_world(torch.device(t.device).type) if task.data_parallel else World()
        self.model_dir = task.model_dir
        make_directory(self.model_dir)
        self.lock = TrainingLock(self.model_dir).acquire() if self.world.is_main else None
        self.ckpt_dir = self.model_dir / "checkpoints"
        if not resume:
            self._refuse_to_start_over()
        self.ckpt_dir.mkdir(exist_ok=True)
        self.log = TrainingLog(self.model_dir, tensorboard=task.tensorboard, quiet=quiet, enabled=self.world.is_main)
        self.progress_bar = progress_bar and not quiet and self.world.is_main
        self.checkpoint_every = t.checkpoint_every  # updates between writes of last.pt besides validations' (0: none)
        self.window = Window()
        self._validated_at = -1
        setup_threads(t.threads, self.world.local_size)
        torch.manual_seed(t.seed)
        self.device = device_for(self.world, t.device)
        self.model = task.setup(self.world, self.device, self.log).to(self.device)
        if self.world.rank > 0:  # the same initial model everywhere, but each rank its own dropout masks
            torch.manual_seed(rank_seed(t.seed, self.world.rank))
        self.optimizer = build_optimizer([p for p in self.model.parameters() if p.requires_grad], t)
        self.schedule = task.schedule()
        self.precision = Precision(task.precision, self.device)
        self.progress = Progress()
        if resume:
            self._restore(self.ckpt_dir / "last.pt")
        if self.world.is_main:  # after the restore's checks: a refused resume leaves the directory's record as it was
            task.write_files()
            save_config(task.config, self.model_dir / "config.yaml")
        task.start(self.model, self.precision)
        self.log(task.describe() + (f"; {self.world.size} ranks" if self.world.distributed else "")
                 + (f"; {task.precision} autocast" if task.precision != "fp32" else ""))
        self.log(f"source: {source_revision()}")  # logged at every start, so a resume on other code shows

    def _refuse_to_start_over(self) -> None:
        try:
            check_fresh_start(self.model_dir)
        except DataError:
            if self.lock is not None:
                self.lock.release()
            raise

    # -- the loop ------------------------------------------------------------------------------
    def train(self) -> Progress:
        """Train until a budget, early stopping or a signal; on a signal, save last.pt and raise
        Preempted.  Returns the progress record."""
        try:
            return self._train()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _train(self) -> Progress:
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
        if self.world.is_main:  # the record of a finished run
            with atomic_write(self.model_dir / "done.json", "w") as fh:
                json.dump({**asdict(p), "target_tokens_per_s": p.tokens / p.elapsed if p.elapsed else 0.0,
                           "source": source_revision(), "definitions": DEFINITIONS}, fh, indent=1)
        self._close(f"training stopped: {p.stopped}; {p.update} updates in {p.elapsed / 60:.1f} min, "
                    f"best dev {self.task.metric} {score_text(p.best_metric)}")
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
        for unit in self.task.epoch_units(p.epoch, starting=p.position == 0)[p.position:]:
            stop = self._train_update(unit, signals, bar)
            if stop is not None:
                return stop
        p.epoch += 1
        p.position = 0
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
            self.save("last.pt", keep=True)
        return None

    def _step(self, unit, signals: StopSignals) -> tuple[Update, str, int]:
        """Train on `unit`; its figures and the stop signal, both agreed over the ranks."""
        start = time.perf_counter()
        loss, tokens = self.train_on(unit)
        loss, tokens, seconds, *votes = self.world.sum_step(
            [loss, tokens, time.perf_counter() - start, *stop_votes(signals.signum, self._launcher_gone())])
        cause, signum = agreed_stop(votes)
        return Update(loss, int(tokens), seconds / self.world.size), cause, signum

    def train_on(self, unit) -> tuple[float, int]:
        """One update on `unit`: this rank's summed loss and target tokens."""
        self.model.train()
        set_lr(self.optimizer, self.schedule.lr(self.progress.update))
        self.optimizer.zero_grad(set_to_none=True)
        loss, tokens = self.task.backward(unit, self.progress.update)
        self.precision.step(self.optimizer, self.model.parameters(), self.training.clip_norm)
        return loss, tokens

    def _count(self, update: Update) -> None:
        p = self.progress
        p.update += 1
        p.position += 1
        p.tokens += update.tokens
        p.elapsed += update.seconds

    def _report(self, update: Update, bar) -> None:
        """The progress bar, and the log line every `log_every` updates."""
        p = self.progress
        self.window.add(update.loss, update.tokens)
        if bar is not None:  # the figures first: a plain progress line is written by update
            bar.set_postfix_str(f"loss/tok {update.loss / update.tokens:.3f}, "
                                f"{p.tokens / max(p.elapsed, 1e-9):.0f} tok/s", refresh=False)
            bar.update(self._bar_position() - bar.n)
        if p.update % self.training.log_every == 0:
            self.task.log_window(self.window, p, self.schedule.lr(p.update))
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
                self._keep_best(verdict["best_scores"])
        self.save(*(["best.pt"] if verdict["best"] else []), "last.pt", keep=True)
        return stop_for(verdict["stop"])

    def _validate(self, scheduled: bool) -> dict:
        t = self.training
        scores = self.task.evaluate(self.progress)
        value = scores[self.task.metric]
        if scheduled:
            best = self.schedule.observe(value)
        else:
            best = self.schedule.is_better(value, self.progress.best_metric)
        if best:
            self._keep_best(scores)
        return {"best": best, "best_scores": scores if best else None, "schedule": self.schedule.state_dict(),
                "stop": plateau_stop(self.schedule, t.patience, t.stop_at_min_lr, self.task.metric_name)}

    def _keep_best(self, scores: dict[str, float]) -> None:
        self.progress.best_metric = scores[self.task.metric]
        self.progress.best_scores = dict(scores)

    # -- checkpoints ---------------------------------------------------------------------------
    def _payload(self) -> dict[str, Any]:
        """What a checkpoint holds, the task's part included; collective: every rank gives its RNG states."""
        rngs = self.world.gather(rng_state(self.device))
        config = config_dict(self.task.config)
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "progress": asdict(self.progress),
            "rng": rngs[0]["torch"],  # rank 0's torch generator (what single-process checkpoints had)
            "rng_ranks": rngs,
            "precision": self.precision.state_dict(),
            "world_size": self.world.size,
            "config": config,
            "model_config": config["model"],
            "window": [self.window.loss, self.window.tokens],  # rank 0's: a resumed run logs the same lines
            **self.task.state(),
        }

    def save(self, *names: str, keep: bool = False) -> None:
        """Write the checkpoint(s) `names` (best.pt, last.pt) on rank 0, and with `keep` the
        weights as a kept checkpoint (training.keep_checkpoints); collective: every rank calls it."""
        payload = self._payload()
        if not self.world.is_main:
            return
        for name in names:
            save_model_checkpoint(self.ckpt_dir / name, payload)
        if keep and self.training.keep_checkpoints:
            save_model_checkpoint(self.ckpt_dir / kept_name(self.progress.update), weights_only(payload))
            prune_kept(self.ckpt_dir, self.training.keep_checkpoints)

    def _restore(self, path: Path) -> None:
        payload = load_model_checkpoint(path)
        if "optimizer" not in payload:
            raise CheckpointError(f"{path}: holds no training state to resume from")
        self.task.check(payload, path)
        load_model_state(self.model, payload, path)
        self.optimizer.load_state_dict(payload["optimizer"])
        self.schedule.load_state_dict(payload["schedule"])
        self.precision.load_state_dict(payload.get("precision"))
        self.progress = Progress.saved({**payload["progress"], "stopped": ""})  # a new budget may let it go on
        self.task.load_state(payload)
        loss, tokens = payload.get("window", (0.0, 0))  # (none before checkpoints kept it: an empty one)
        self.window = Window(loss, tokens)
        self._restore_rng(payload)
        p, unit = self.progress, self.task.unit
        self.log(f"resumed from {path} at update {p.update} (epoch {p.epoch + 1}"
                 + (f", {unit} {p.position})" if unit else ")"))

    def _restore_rng(self, payload: dict) -> None:
        """Each rank's generators as saved; on another number of ranks, rank 0 takes the saved
        rank 0's and the others start from their seed (exact resume then needs no dropout).
        Older LM checkpoints kept every generator of their one process under `rng`."""
        states = payload.get("rng_ranks")
        if states and len(states) == self.world.size:
            set_rng_state(states[self.world.rank], self.device)
            return
        if self.world.rank == 0:
            saved = payload["rng"]
            set_rng_state(states[0] if states else saved if isinstance(saved, dict) else {"torch": saved}, self.device)
        else:
            torch.manual_seed(rank_seed(self.training.seed, self.world.rank))
        saved = payload.get("world_size", 1)
        if saved != self.world.size:
            self.log(f"checkpoint of {saved} rank(s) resumed on {self.world.size}: ranks beyond the first start "
                     f"their dropout streams from the seed")

    # -- the progress bar ----------------------------------------------------------------------
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
