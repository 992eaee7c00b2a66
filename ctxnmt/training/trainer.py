"""Training a translation model: its batches, updates, validation and checkpoints, in the
loop every trainer shares (ctxnmt.training.loop: budgets, early stopping, signals, exact resume).

Resume is exact because everything that decides the future of a run is in the
checkpoint: parameters, optimiser moments, the schedule, the loss scale (fp16), every
rank's RNGs (dropout), and the position in the epoch (batch order is a pure function
of seed and epoch, whatever the number of ranks).  On several ranks
(ctxnmt.training.distributed) each update's batch is dealt to the ranks; validation,
logging and checkpoint files are rank 0's, and the other ranks wait for its verdict.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from ctxnmt.config import Config, save_config
from ctxnmt.data.batching import epoch_batches, make_batch, padding_ratio
from ctxnmt.data.documents import RandomContextSize
from ctxnmt.data.prepare import Prepared, prepare
from ctxnmt.errors import ConfigError
from ctxnmt.models.nmt import NMTModel, build_model, check_names, count_parameters
from ctxnmt.training.distributed import collective, device_for, init_world, rank_seed, rng_state, set_rng_state
from ctxnmt.training.graphs import GraphedSteps
from ctxnmt.training.loop import TrainingLoop, Window, held_training, position_in
from ctxnmt.training.optim import PlateauSchedule, build_optimizer, set_lr
from ctxnmt.training.precision import Precision
from ctxnmt.training.validate import document_context, validate
from ctxnmt.models.migrations import load_model_checkpoint, save_model_checkpoint
from ctxnmt.utils.checkpoint import check_compatible, load_model_state
from ctxnmt.utils.revision import source_revision


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
    position = position_in("batch_in_epoch")


class _Loss(torch.nn.Module):
    """The model's summed loss as a module's forward pass, which DistributedDataParallel wraps."""

    def __init__(self, model: NMTModel):
        super().__init__()
        self.model = model

    def forward(self, batch, label_smoothing: float):
        return self.model.loss(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask, label_smoothing, batch.context)


class Trainer(TrainingLoop):
    def __init__(self, config: Config, resume: bool = False, quiet: bool = False, progress_bar: bool = True):
        check_names(config.model)  # before the model directory is made and the data prepared
        self.config = config
        t = config.training
        super().__init__(t, config.model_dir, init_world(torch.device(t.device).type), quiet=quiet,
                         progress_bar=progress_bar, resume=resume)
        self.metric = self.metric_name = t.selection_metric
        self.checkpoint_every = t.checkpoint_every
        self.device = device_for(self.world, t.device)
        self.data: Prepared = self._prepare()
        self.src_lens, self.tgt_lens = self.data.train.src.lens, self.data.train.tgt.lens
        self.train_context = document_context(self.data.train, config, "train", t.document_context)
        self.random_context = (RandomContextSize(self.train_context, config.model.doc_sents, t.seed)
                               if t.context_size == "random" else None)
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
        if resume:
            self._restore(self.ckpt_dir / "last.pt")
        if self.world.is_main:  # after the restore's checks: a refused resume leaves the directory's record as it was
            save_config(config, self.model_dir / "config.yaml")
        self.loss_fn = self._wrap(_Loss(self.model))
        self.graphs = self._graphs()
        self.log(f"model: {count_parameters(self.model):,} parameters "
                 f"({config.model.encoder} encoder, {config.model.decoder} decoder, {config.model.cell} cell, "
                 f"{config.model.target_context} target context)"
                 + (f"; {self.world.size} ranks" if self.world.distributed else "")
                 + (f"; {t.precision} autocast" if t.precision != "fp32" else ""))
        self.log(f"source: {source_revision()}")  # logged at every start, so a resume on other code shows

    def _prepare(self) -> Prepared:
        """Each machine's first rank prepares (or finds prepared) the data before the others read it;
        a training already in the directory (one being resumed) refuses data changed since it began."""
        if self.world.local_rank > 0:
            self.world.barrier()
        data = prepare(self.config, log=self.log, keep=bool(held_training(self.model_dir)))
        if self.world.local_rank == 0:
            self.world.barrier()
        return data

    def _graphs(self) -> GraphedSteps | None:
        t = self.config.training
        if not t.cuda_graphs:
            return None
        if self.world.distributed:  # ctxnmt train refuses this combination before it starts ranks
            raise ConfigError("training.cuda_graphs runs on one device; it cannot be used with several ranks")
        return GraphedSteps(self.model, t.label_smoothing, lambda: self.precision.autocast(cache=False), self.log)

    def _wrap(self, loss: _Loss) -> torch.nn.Module:
        """DistributedDataParallel on several ranks (after any restore: it starts from rank 0's parameters).
        Every model variant uses all its parameters in every forward pass (checked for each config in
        configs/), so DDP need not search the graph for unused ones."""
        if not self.world.distributed:
            return loss
        with collective("wrapping the model in DistributedDataParallel"):
            return DistributedDataParallel(loss, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    # -- the loop's parts ----------------------------------------------------------
    def epoch_units(self, epoch: int) -> list[list[int]]:
        """The epoch's batches (sentence indices), a pure function of seed and epoch."""
        t = self.config.training
        batches = epoch_batches(self.src_lens, self.tgt_lens, t.batch_tokens, t.batch_sents, t.seed, epoch)
        if self.progress.batch_in_epoch == 0:
            ps, pt = padding_ratio(batches, self.src_lens, self.tgt_lens)
            self.log(f"epoch {epoch + 1}: {len(batches)} batches, padding {ps:.1%} source / {pt:.1%} target")
        return batches

    def train_on(self, index: list[int]) -> tuple[float, int]:
        share, weight = self.world.share(index)
        train = self.data.train
        context = self.random_context.at(self.progress.update) if self.random_context else self.train_context
        batch = make_batch(share, train.src, train.tgt, context, self.config.model.doc_sents)
        if self.graphs is not None:
            return self.graphed_step(batch, len(index))
        return self.train_step(batch.to(self.device), len(index), weight)

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

    def graphed_step(self, batch, update_sents: int) -> tuple[float, int]:
        """`train_step` through CUDA graphs (ctxnmt.training.graphs) for a `batch` still on the
        host: one device, the batch the whole update."""
        t = self.config.training
        self.model.train()
        set_lr(self.optimizer, self.schedule.lr(self.progress.update))
        self.graphs.zero_grad()
        nll = self.graphs.forward_backward(batch, 1.0 / update_sents)
        self.precision.step(self.optimizer, self.model.parameters(), t.clip_norm)
        return float(nll), int(batch.tgt_mask.sum())

    def log_window(self, window: Window) -> None:
        p = self.progress
        rate = window.timed / (time.perf_counter() - window.start)
        self.log(f"update {p.update}: loss/token {window.loss / window.tokens:.4f}, "
                 f"{rate:.0f} target tok/s, lr {self.schedule.lr(p.update):.2e}")
        self.log.scalar("train/loss_per_token", window.loss / window.tokens, p.update)
        self.log.scalar("train/target_tokens_per_s", rate, p.update)

    def evaluate(self) -> dict[str, float]:
        p = self.progress
        result = validate(self.model, self.data, self.config, self.device)
        scores = ", ".join(f"{k} {v:.2f}" for k, v in result.items())
        self.log(f"validation at update {p.update} ({p.tokens} target tokens): {scores}")
        for k, v in result.items():
            self.log.scalar(f"dev/{k}", v, p.update)
        return result

    def best_so_far(self) -> float | None:
        return self.progress.best_metric

    def keep_best(self, scores: dict[str, float]) -> None:
        self.progress.best_metric = scores[self.metric]
        self.progress.best_scores = dict(scores)

    def record(self) -> dict:
        p = self.progress
        return {**asdict(p), "target_tokens_per_s": p.tokens / p.elapsed if p.elapsed else 0.0,
                "source": source_revision()}

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
            "window": self.window.state(),  # rank 0's log window: a resumed run logs the same lines
        }

    def save(self, *names: str) -> None:
        """Write the checkpoint(s) on rank 0; collective (every rank must call it)."""
        payload = self._payload()
        if self.world.is_main:
            for name in names:
                save_model_checkpoint(self.ckpt_dir / name, payload)

    def _restore(self, path: Path) -> None:
        payload = load_model_checkpoint(path)
        check_compatible(payload, path, self.config.to_dict()["model"], self.data.src_vocab.fingerprint(),
                         self.data.tgt_vocab.fingerprint())
        load_model_state(self.model, payload, path)
        self.optimizer.load_state_dict(payload["optimizer"])
        self.schedule.load_state_dict(payload["schedule"])
        self.precision.load_state_dict(payload.get("precision"))
        self.progress = Progress(**payload["progress"])
        self.progress.stopped = ""
        self.restore_window(payload)
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
