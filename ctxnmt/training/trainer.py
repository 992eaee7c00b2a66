"""The training loop: batches, updates, validation, early stopping, exact resume.

Resume is exact because everything that decides the future of a run is in the
checkpoint: parameters, optimiser moments, the schedule, the loss scale (fp16), every
rank's RNGs (dropout), and the position in the epoch (batch order is a pure function
of seed and epoch, whatever the number of ranks).  On several ranks
(ctxnmt.training.distributed) each update's batch is dealt to the ranks; validation,
logging and checkpoint files are rank 0's, and the other ranks wait for its verdict.
SIGINT and SIGTERM stop training at the next update boundary with last.pt saved.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ctxnmt.config import Config, save_config
from ctxnmt.data.batching import epoch_batches, make_batch, padding_ratio
from ctxnmt.data.prepare import Prepared, prepare
from ctxnmt.models.nmt import NMTModel, build_model, count_parameters
from ctxnmt.training.budget import budget_reached
from ctxnmt.training.distributed import (
    LAUNCHER_PID,
    PeerFailure,
    World,
    collective,
    device_for,
    init_world,
    rank_seed,
    rng_state,
    set_rng_state,
)
from ctxnmt.training.optim import PlateauSchedule, build_optimizer, plateau_stop, set_lr
from ctxnmt.training.precision import Precision
from ctxnmt.training.validate import document_context, validate
from ctxnmt.utils.checkpoint import check_compatible, load_checkpoint, load_model_state, save_checkpoint
from ctxnmt.utils.io import atomic_write
from ctxnmt.utils.lock import TrainingLock
from ctxnmt.utils.preemption import Preempted, StopSignals, agreed_stop, stop_votes
from ctxnmt.utils.revision import source_revision
from ctxnmt.utils.threads import setup_threads


@dataclass
class Progress:
    epoch: int = 0
    batch_in_epoch: int = 0
    update: int = 0
    elapsed: float = 0.0  # seconds of training so far, across resumes
    tokens: int = 0
    best_metric: float | None = None
    best_scores: dict[str, float] | None = None  # every dev score of the best checkpoint
    stopped: str = ""
    validation_due: bool = False  # stopped by a signal where a validation was due: it runs first on resume


class Logger:
    """Plain-text log in the model directory plus, when available, TensorBoard.
    Silent on ranks other than 0 (`enabled=False`)."""

    def __init__(self, model_dir: Path, tensorboard: bool = True, quiet: bool = False, enabled: bool = True):
        self.path = model_dir / "train.log"
        self.quiet = quiet
        self.enabled = enabled
        self.tb = None
        if tensorboard and enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter  # optional, and slow to import

                self.tb = SummaryWriter(str(model_dir / "tensorboard"))
            except ImportError:  # tensorboard is optional at run time
                self.tb = None

    def __call__(self, message: str) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(time.strftime("%Y-%m-%d %H:%M:%S ") + message + "\n")
        if not self.quiet:
            tqdm.write(message, file=sys.stderr)  # keeps a running progress bar intact

    def scalar(self, name: str, value: float, step: int) -> None:
        if self.tb is not None:
            self.tb.add_scalar(name, value, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


class _Loss(torch.nn.Module):
    """The model's summed loss as a module's forward pass, which DistributedDataParallel wraps."""

    def __init__(self, model: NMTModel):
        super().__init__()
        self.model = model

    def forward(self, batch, label_smoothing: float):
        return self.model.loss(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask, label_smoothing, batch.context)


class Trainer:
    def __init__(self, config: Config, resume: bool = False, quiet: bool = False, progress_bar: bool = True):
        self.config = config
        t = config.training
        self.world: World = init_world(torch.device(t.device).type)
        self.model_dir = Path(config.model_dir)
        self.model_dir.mkdir(parents=True, exist_ok=True)
        self.lock = TrainingLock(self.model_dir).acquire() if self.world.is_main else None
        self.ckpt_dir = self.model_dir / "checkpoints"
        self.ckpt_dir.mkdir(exist_ok=True)
        self.log = Logger(self.model_dir, quiet=quiet, enabled=self.world.is_main)
        self.progress_bar = progress_bar and not quiet and self.world.is_main
        self.resume = resume
        self._stop_signal = 0  # the signal the ranks agreed to stop on
        setup_threads(t.threads, self.world.local_size)
        torch.manual_seed(t.seed)
        self.device = device_for(self.world, t.device)
        self.data: Prepared = self._prepare()
        if self.world.is_main:
            save_config(config, self.model_dir / "config.yaml")
        self.train_context = document_context(self.data.train, config, "train", t.document_context)
        document_context(self.data.dev, config, "dev")  # validation needs dev context too: fail early
        self.model: NMTModel = build_model(config.model, len(self.data.src_vocab), len(self.data.tgt_vocab))
        self.model.to(self.device)
        if self.world.rank > 0:  # the same initial model everywhere, but each rank its own dropout masks
            torch.manual_seed(rank_seed(t.seed, self.world.rank))
        self.optimizer = build_optimizer([p for p in self.model.parameters() if p.requires_grad], t)
        self.schedule = PlateauSchedule(t.lr, t.warmup_updates, t.lr_decay, t.lr_patience, t.min_lr,
                                        higher_is_better=t.selection_metric == "bleu",
                                        total=t.max_updates, cooldown=t.cooldown_updates)
        self.precision = Precision(t.precision, self.device)
        self.progress = Progress()
        self._validated_at = -1
        if resume:
            self._restore(self.ckpt_dir / "last.pt")
        self.loss_fn = self._wrap(_Loss(self.model))
        self.log(f"model: {count_parameters(self.model):,} parameters "
                 f"({config.model.encoder} encoder, {config.model.decoder} decoder, {config.model.cell} cell, "
                 f"{config.model.target_context} target context)"
                 + (f"; {self.world.size} ranks" if self.world.distributed else "")
                 + (f"; {t.precision} autocast" if t.precision != "fp32" else ""))
        self.log(f"source: {source_revision()}")  # logged at every start, so a resume on other code shows

    def _prepare(self) -> Prepared:
        """Each machine's first rank prepares (or finds prepared) the data before the others read it."""
        if self.world.local_rank > 0:
            self.world.barrier()
        data = prepare(self.config, log=self.log)
        if self.world.local_rank == 0:
            self.world.barrier()
        return data

    def _wrap(self, loss: _Loss) -> torch.nn.Module:
        """DistributedDataParallel on several ranks (after any restore: it starts from rank 0's parameters).
        Every model variant uses all its parameters in every forward pass (checked for each config in
        configs/), so DDP need not search the graph for unused ones."""
        if not self.world.distributed:
            return loss
        with collective("wrapping the model in DistributedDataParallel"):
            return DistributedDataParallel(loss, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    # -- checkpoints -----------------------------------------------------------
    def _payload(self) -> dict:
        """What a checkpoint holds; collective: every rank gives its RNG states."""
        rngs = self.world.gather(rng_state(self.device))
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "progress": asdict(self.progress),
            "rng": rngs[0]["torch"],  # rank 0's torch generator (what single-process checkpoints had)
            "rng_ranks": rngs,
            "precision": self.precision.state_dict(),
            "world_size": self.world.size,
            "config": self.config.to_dict(),
            "model_config": self.config.to_dict()["model"],
            "src_vocab": self.data.src_vocab.fingerprint(),
            "tgt_vocab": self.data.tgt_vocab.fingerprint(),
        }

    def save(self, *names: str) -> None:
        """Write the checkpoint(s) on rank 0; collective (every rank must call it)."""
        payload = self._payload()
        if self.world.is_main:
            for name in names:
                save_checkpoint(self.ckpt_dir / name, payload)

    def _restore(self, path: Path) -> None:
        payload = load_checkpoint(path)
        check_compatible(payload, path, self.config.to_dict()["model"], self.data.src_vocab.fingerprint(),
                         self.data.tgt_vocab.fingerprint())
        load_model_state(self.model, payload, path)
        self.optimizer.load_state_dict(payload["optimizer"])
        self.schedule.load_state_dict(payload["schedule"])
        self.precision.load_state_dict(payload.get("precision"))
        self.progress = Progress(**payload["progress"])
        self.progress.stopped = ""
        self._restore_rng(payload)
        self.log(f"resumed from {path} at update {self.progress.update} (epoch {self.progress.epoch + 1}, "
                 f"batch {self.progress.batch_in_epoch})")

    def _restore_rng(self, payload: dict) -> None:
        """Each rank's generators as saved; on another number of ranks, rank 0 takes the saved
        rank 0's and the others start from their seed (exact resume then needs no dropout)."""
        states = payload.get("rng_ranks")
        if states and len(states) == self.world.size:
            set_rng_state(states[self.world.rank], self.device)
            return
        if self.world.rank == 0:
            set_rng_state(states[0] if states else {"torch": payload["rng"]}, self.device)
        else:
            torch.manual_seed(rank_seed(self.config.training.seed, self.world.rank))
        saved = payload.get("world_size", 1)
        if saved != self.world.size:
            self.log(f"checkpoint of {saved} rank(s) resumed on {self.world.size}: ranks beyond the first start "
                     f"their dropout streams from the seed")

    # -- the loop ----------------------------------------------------------------
    def _limits_reached(self) -> str:
        return budget_reached(self.config.training, self.progress)

    def train_step(self, batch, update_sents: int | None = None, weight: float = 1.0) -> tuple[float, int]:
        """One update from `batch`, this rank's share of an update of `update_sents` sentences
        (default: the batch is the whole update); weight 0 marks a dummy share.  Returns the
        share's summed loss and target tokens (0, 0 for a dummy)."""
        t = self.config.training
        self.model.train()
        set_lr(self.optimizer, self.schedule.lr(self.progress.update))
        self.optimizer.zero_grad(set_to_none=True)
        with self.precision.autocast():
            nll, n_tokens = self.loss_fn(batch, t.label_smoothing)
        # dl4mt: cross-entropy summed over each sentence, averaged over the update's sentences.  DDP
        # averages the ranks' gradients, so each rank's share counts `size` times.
        with collective("exchanging gradients"):
            self.precision.backward(nll * (weight * self.world.size) / (update_sents or batch.n_sents))
        self.precision.step(self.optimizer, self.model.parameters(), t.clip_norm)
        return float(nll.detach()) * weight, n_tokens if weight else 0

    def train(self) -> Progress:
        """Train until a budget, early stopping or a signal; on a signal, save last.pt and raise Preempted."""
        try:
            return self._train()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _train(self) -> Progress:
        with StopSignals(announce=self.world.is_main) as signals:
            try:
                self._loop(signals)
            except PeerFailure:
                self.log.close()
                raise
        p = self.progress
        if p.stopped.startswith("stopped by "):
            message = f"{p.stopped} at update {p.update}; saved {self.ckpt_dir / 'last.pt'}"
            self.log(f"training {message}")
            self.log.close()
            self.world.close()
            raise Preempted(message, self._stop_signal)
        if self.world.is_main:
            with atomic_write(self.model_dir / "done.json", "w") as fh:
                json.dump({**asdict(p), "target_tokens_per_s": p.tokens / p.elapsed if p.elapsed else 0.0,
                           "source": source_revision()}, fh, indent=1)
        self.log(f"training stopped: {p.stopped}; {p.update} updates in {p.elapsed / 60:.1f} min, "
                 f"best dev {self.config.training.selection_metric} {p.best_metric}")
        self.log.close()
        self.world.close()
        return p

    def _loop(self, signals: StopSignals) -> None:
        t, p, train = self.config.training, self.progress, self.data.train
        src_lens = [len(s) for s in train.src]
        tgt_lens = [len(s) for s in train.tgt]
        bar = self._make_bar()
        window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
        stop = ""
        if p.validation_due:  # the run this resumes was stopped by a signal where it was to validate
            p.validation_due = False  # and its verdict may be the stop the uninterrupted run made there
            stop = self._validate_and_save(scheduled=p.update % t.valid_every == 0)
        stop = stop or self._limits_reached()
        while not stop:
            batches = epoch_batches(src_lens, tgt_lens, t.batch_tokens, t.batch_sents, t.seed, p.epoch)
            if p.batch_in_epoch == 0:
                ps, pt = padding_ratio(batches, src_lens, tgt_lens)
                self.log(f"epoch {p.epoch + 1}: {len(batches)} batches, padding {ps:.1%} source / {pt:.1%} target")
            for index in batches[p.batch_in_epoch:]:
                start = time.perf_counter()
                share, weight = self.world.share(index)
                batch = make_batch(share, train.src, train.tgt, self.train_context, self.config.model.doc_sents)
                loss, n_tokens = self.train_step(batch.to(self.device), len(index), weight)
                # Every rank must take the same decisions: they are taken on sums over the ranks.
                loss, n_tokens, seconds, *votes = self.world.sum_step(
                    [loss, n_tokens, time.perf_counter() - start,
                     *stop_votes(signals.signum, self._launcher_gone())])
                n_tokens = int(n_tokens)
                if not math.isfinite(loss):
                    self.log(f"update {p.update + 1}: loss is {loss}; stopping")
                    p.stopped = "non-finite loss"
                    stop = p.stopped
                    break
                p.update += 1
                p.batch_in_epoch += 1
                p.tokens += n_tokens
                p.elapsed += seconds / self.world.size
                window_loss += loss
                window_tokens += n_tokens
                if bar is not None:
                    bar.update(self._bar_position() - bar.n)
                    bar.set_postfix_str(f"loss/tok {loss / n_tokens:.3f}, {p.tokens / max(p.elapsed, 1e-9):.0f} tok/s")
                if p.update % t.log_every == 0:
                    rate = window_tokens / (time.perf_counter() - window_start)
                    self.log(f"update {p.update}: loss/token {window_loss / window_tokens:.4f}, "
                             f"{rate:.0f} target tok/s, lr {self.schedule.lr(p.update):.2e}")
                    self.log.scalar("train/loss_per_token", window_loss / window_tokens, p.update)
                    self.log.scalar("train/target_tokens_per_s", rate, p.update)
                    window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
                stop = self._limits_reached()
                cause, self._stop_signal = agreed_stop(votes)
                if cause:  # save now; a validation due here runs first thing on resume
                    p.validation_due = p.update % t.valid_every == 0 or bool(stop)
                    stop = p.stopped = f"stopped by {cause}"
                    break
                if p.update % t.valid_every == 0 or stop:
                    stop = self._validate_and_save(scheduled=p.update % t.valid_every == 0) or stop
                elif t.checkpoint_every and p.update % t.checkpoint_every == 0:
                    self.save("last.pt")
                if stop:
                    break
            else:
                p.epoch += 1
                p.batch_in_epoch = 0
                stop = self._limits_reached()
                if stop:
                    self._validate_and_save(scheduled=False)
        if bar is not None:
            bar.close()
        p.stopped = p.stopped or stop
        self.save("last.pt")

    def _launcher_gone(self) -> bool:
        """Under `ctxnmt train --nproc`, a launcher that died without passing a signal on
        (SIGKILL) leaves its ranks to stop as if signalled."""
        launcher = os.environ.get(LAUNCHER_PID)
        return bool(launcher) and os.getppid() != int(launcher)

    def _validate_and_save(self, scheduled: bool = True) -> str:
        """Validate (rank 0), keep the best checkpoint, and say whether to stop early.

        Only scheduled validations (every `valid_every` updates) move the
        learning-rate schedule and the patience counter: an extra validation
        where a run happens to be interrupted must not change its future, or
        resuming would not equal an uninterrupted run.  Other ranks wait for rank
        0's verdict and take its schedule (the learning rate may have decayed)."""
        p = self.progress
        if self._validated_at == p.update:  # an epoch can end on a validation update
            return ""
        self._validated_at = p.update
        verdict = self._validate(scheduled) if self.world.is_main else None
        verdict = self.world.broadcast(verdict)
        if not self.world.is_main:
            self.schedule.load_state_dict(verdict["schedule"])
            p.best_metric, p.best_scores = verdict["best_metric"], verdict["best_scores"]
        self.save(*(["best.pt"] if verdict["best"] else []), "last.pt")
        return verdict["stop"]

    def _validate(self, scheduled: bool) -> dict:
        t, p = self.config.training, self.progress
        result = validate(self.model, self.data, self.config, self.device)
        scores = ", ".join(f"{k} {v:.2f}" for k, v in result.items())
        self.log(f"validation at update {p.update} ({p.tokens} target tokens): {scores}")
        for k, v in result.items():
            self.log.scalar(f"dev/{k}", v, p.update)
        metric = result[t.selection_metric]
        best = self.schedule.observe(metric) if scheduled else self.schedule.is_better(metric, p.best_metric)
        if best:
            p.best_metric = metric
            p.best_scores = dict(result)
        stop = plateau_stop(self.schedule, t.patience, t.stop_at_min_lr, t.selection_metric)
        return {"best": best, "stop": stop, "schedule": self.schedule.state_dict(), "best_metric": p.best_metric,
                "best_scores": p.best_scores}

    def _bar_position(self) -> int:
        t, p = self.config.training, self.progress
        if t.max_minutes:
            return int(p.elapsed)
        return p.update

    def _make_bar(self):
        if not self.progress_bar:
            return None
        t = self.config.training
        if t.max_minutes:
            return tqdm(total=int(60 * t.max_minutes), initial=self._bar_position(), unit="s", desc="training",
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}s [ETA {remaining}] {postfix}")
        total = t.max_updates or None
        return tqdm(total=total, initial=self._bar_position(), unit="upd", desc="training")
