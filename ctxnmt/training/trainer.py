"""The training loop: batches, updates, validation, early stopping, exact resume.

Resume is exact because everything that decides the future of a run is in the
checkpoint: parameters, optimiser moments, the schedule, torch's RNG (dropout),
and the position in the epoch (batch order is a pure function of seed and epoch).
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

from ctxnmt.config import Config, save_config
from ctxnmt.data.batching import epoch_batches, make_batch, padding_ratio
from ctxnmt.data.prepare import Prepared, prepare
from ctxnmt.models.nmt import NMTModel, build_model, count_parameters
from ctxnmt.training.budget import budget_reached
from ctxnmt.training.checkpoint import check_compatible, load_checkpoint, load_model_state, save_checkpoint
from ctxnmt.training.optim import PlateauSchedule, build_optimizer, set_lr
from ctxnmt.training.validate import document_context, validate
from ctxnmt.utils.io import atomic_write


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


class Logger:
    """Plain-text log in the model directory plus, when available, TensorBoard."""

    def __init__(self, model_dir: Path, tensorboard: bool = True, quiet: bool = False):
        self.path = model_dir / "train.log"
        self.quiet = quiet
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(model_dir / "tensorboard"))
            except ImportError:  # tensorboard is optional at run time
                self.tb = None

    def __call__(self, message: str) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(time.strftime("%Y-%m-%d %H:%M:%S ") + message + "\n")
        if not self.quiet:
            from tqdm import tqdm

            tqdm.write(message, file=sys.stderr)  # keeps a running progress bar intact

    def scalar(self, name: str, value: float, step: int) -> None:
        if self.tb is not None:
            self.tb.add_scalar(name, value, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def setup_threads(threads: int) -> None:
    torch.set_num_threads(threads or os.cpu_count() or 1)


class Trainer:
    def __init__(self, config: Config, resume: bool = False, quiet: bool = False, progress_bar: bool = True):
        self.config = config
        self.model_dir = Path(config.model_dir)
        self.model_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_dir = self.model_dir / "checkpoints"
        self.ckpt_dir.mkdir(exist_ok=True)
        self.log = Logger(self.model_dir, quiet=quiet)
        self.progress_bar = progress_bar and not quiet
        self.resume = resume
        setup_threads(config.training.threads)
        torch.manual_seed(config.training.seed)
        self.device = torch.device(config.training.device)
        self.data: Prepared = prepare(config, log=self.log)
        save_config(config, self.model_dir / "config.yaml")
        self.train_context = document_context(self.data.train, config, "train")
        document_context(self.data.dev, config, "dev")  # validation needs dev context too: fail early
        self.model: NMTModel = build_model(config.model, len(self.data.src_vocab), len(self.data.tgt_vocab))
        self.model.to(self.device)
        t = config.training
        self.optimizer = build_optimizer([p for p in self.model.parameters() if p.requires_grad], t)
        self.schedule = PlateauSchedule(t.lr, t.warmup_updates, t.lr_decay, t.lr_patience, t.min_lr,
                                        higher_is_better=t.early_stop_metric == "bleu")
        self.progress = Progress()
        self._validated_at = -1
        if resume:
            self._restore(self.ckpt_dir / "last.pt")
        self.log(f"model: {count_parameters(self.model):,} parameters "
                 f"({config.model.encoder} encoder, {config.model.decoder} decoder, {config.model.cell} cell, "
                 f"{config.model.target_context} target context)")

    # -- checkpoints -----------------------------------------------------------
    def _payload(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "progress": asdict(self.progress),
            "rng": torch.get_rng_state(),
            "config": self.config.to_dict(),
            "model_config": self.config.to_dict()["model"],
            "src_vocab": self.data.src_vocab.fingerprint(),
            "tgt_vocab": self.data.tgt_vocab.fingerprint(),
        }

    def save(self, name: str) -> None:
        save_checkpoint(self.ckpt_dir / name, self._payload())

    def _restore(self, path: Path) -> None:
        payload = load_checkpoint(path)
        check_compatible(payload, path, self.config.to_dict()["model"], self.data.src_vocab.fingerprint(),
                         self.data.tgt_vocab.fingerprint())
        load_model_state(self.model, payload, path)
        self.optimizer.load_state_dict(payload["optimizer"])
        self.schedule.load_state_dict(payload["schedule"])
        self.progress = Progress(**payload["progress"])
        self.progress.stopped = ""
        torch.set_rng_state(payload["rng"])
        self.log(f"resumed from {path} at update {self.progress.update} (epoch {self.progress.epoch + 1}, "
                 f"batch {self.progress.batch_in_epoch})")

    # -- the loop ----------------------------------------------------------------
    def _limits_reached(self) -> str:
        return budget_reached(self.config.training, self.progress)

    def train_step(self, batch) -> tuple[float, int]:
        t = self.config.training
        self.model.train()
        set_lr(self.optimizer, self.schedule.lr(self.progress.update))
        self.optimizer.zero_grad(set_to_none=True)
        nll, n_tokens = self.model.loss(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask, t.label_smoothing,
                                        batch.context)
        # dl4mt: cross-entropy summed over each sentence, averaged over the batch.
        (nll / batch.n_sents).backward()
        if t.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
        self.optimizer.step()
        return float(nll.detach()), n_tokens

    def train(self) -> Progress:
        t, p, train = self.config.training, self.progress, self.data.train
        src_lens = [len(s) for s in train.src]
        tgt_lens = [len(s) for s in train.tgt]
        bar = self._make_bar()
        window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
        stop = self._limits_reached()
        while not stop:
            batches = epoch_batches(src_lens, tgt_lens, t.batch_tokens, t.batch_sents, t.seed, p.epoch)
            if p.batch_in_epoch == 0:
                ps, pt = padding_ratio(batches, src_lens, tgt_lens)
                self.log(f"epoch {p.epoch + 1}: {len(batches)} batches, padding {ps:.1%} source / {pt:.1%} target")
            for index in batches[p.batch_in_epoch:]:
                start = time.perf_counter()
                batch = make_batch(index, train.src, train.tgt, self.train_context, self.config.model.doc_sents)
                loss, n_tokens = self.train_step(batch.to(self.device))
                if not math.isfinite(loss):
                    self.log(f"update {p.update + 1}: loss is {loss}; stopping")
                    p.stopped = "non-finite loss"
                    stop = p.stopped
                    break
                p.update += 1
                p.batch_in_epoch += 1
                p.tokens += n_tokens
                p.elapsed += time.perf_counter() - start
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
                if p.update % t.valid_every == 0 or stop:
                    stop = self._validate_and_save(scheduled=p.update % t.valid_every == 0) or stop
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
        with atomic_write(self.model_dir / "done.json", "w") as fh:
            json.dump({**asdict(p), "target_tokens_per_s": p.tokens / p.elapsed if p.elapsed else 0.0}, fh, indent=1)
        self.log(f"training stopped: {p.stopped}; {p.update} updates in {p.elapsed / 60:.1f} min, "
                 f"best dev {t.early_stop_metric} {p.best_metric}")
        self.log.close()
        return p

    def _validate_and_save(self, scheduled: bool = True) -> str:
        """Validate, keep the best checkpoint, and say whether to stop early.

        Only scheduled validations (every `valid_every` updates) move the
        learning-rate schedule and the patience counter: an extra validation
        where a run happens to be interrupted must not change its future, or
        resuming would not equal an uninterrupted run."""
        t, p = self.config.training, self.progress
        if self._validated_at == p.update:  # an epoch can end on a validation update
            return ""
        self._validated_at = p.update
        result = validate(self.model, self.data, self.config, self.device)
        scores = ", ".join(f"{k} {v:.2f}" for k, v in result.items())
        self.log(f"validation at update {p.update} ({p.tokens} target tokens): {scores}")
        for k, v in result.items():
            self.log.scalar(f"dev/{k}", v, p.update)
        metric = result.get(t.early_stop_metric, result["ppl"])
        if self.schedule.observe(metric) if scheduled else self.schedule.is_better(metric, p.best_metric):
            p.best_metric = metric
            p.best_scores = dict(result)
            self.save("best.pt")
        self.save("last.pt")
        if t.patience and self.schedule.bad >= t.patience:
            return f"no improvement of dev {t.early_stop_metric} in {t.patience} validations"
        return ""

    def _bar_position(self) -> int:
        t, p = self.config.training, self.progress
        if t.max_minutes:
            return int(p.elapsed)
        return p.update

    def _make_bar(self):
        if not self.progress_bar:
            return None
        from tqdm import tqdm

        t = self.config.training
        if t.max_minutes:
            return tqdm(total=int(60 * t.max_minutes), initial=self._bar_position(), unit="s", desc="training",
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}s [ETA {remaining}] {postfix}")
        total = t.max_updates or None
        return tqdm(total=total, initial=self._bar_position(), unit="upd", desc="training")
