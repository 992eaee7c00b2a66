"""Training the residual LM, in the loop every trainer shares (ctxnmt.training.loop:
budgets, early stopping on dev perplexity, signals, atomic checkpoints, exact resume):
truncated BPTT over B parallel streams, an update a segment.

last.pt holds everything a resumed run needs to take the very updates the uninterrupted
one would: the optimiser, the learning rate schedule, the random generators, the position
in the epoch, the stream state carried into the next segment and the log window."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from ctxnmt.config import lookup, read_raw, save_config
from ctxnmt.errors import CheckpointError
from ctxnmt.lm import data as lm_data
from ctxnmt.lm.config import LMConfig
from ctxnmt.lm.model import ResidualLM, detach
from ctxnmt.lm.scoring import check_trained_as, perplexity
from ctxnmt.training.distributed import World, rng_state, set_rng_state
from ctxnmt.training.loop import TrainingLoop, Window, position_in
from ctxnmt.training.optim import PlateauSchedule, build_optimizer, set_lr
from ctxnmt.models.migrations import load_model_checkpoint, save_model_checkpoint
from ctxnmt.utils.revision import source_revision


@dataclass
class LMProgress:
    epoch: int = 0
    update: int = 0
    elapsed: float = 0.0
    best_ppl: float | None = None
    stopped: str = ""
    segment: int = 0  # segments of the current epoch already trained on
    tokens: int = 0
    validation_due: bool = False  # stopped by a signal where a validation was due: it runs first on resume
    position = position_in("segment")


class LMTrainer(TrainingLoop):
    metric, metric_name = "ppl", "perplexity"

    def __init__(self, config: LMConfig, resume: bool = False, quiet: bool = False):
        self.config = config
        t = config.training
        super().__init__(t, config.model_dir, World(), quiet=quiet, tensorboard=False, resume=resume)
        self.device = torch.device(t.device)
        train_words = lm_data.read_split(config.data, "train")
        self.vocab = lm_data.build_vocab(train_words, config.data)
        self.train_data = lm_data.batchify(lm_data.stream(train_words, self.vocab), t.batch_size,
                                           "training text").to(self.device)
        self.dev = lm_data.stream(lm_data.read_split(config.data, "dev"), self.vocab).to(self.device)
        self.model = ResidualLM(config.model, len(self.vocab)).to(self.device)
        self.optimizer = build_optimizer(self.model.parameters(), t)
        self.schedule = PlateauSchedule(t.lr, 0, t.lr_decay, t.lr_patience, t.min_lr, higher_is_better=False)
        self.progress = LMProgress()
        self.stream_state = None  # carried into the next segment of the epoch (None: the epoch's start)
        n_params = sum(p.numel() for p in self.model.parameters())
        self.log(f"LM: {n_params:,} parameters ({config.model.summary} summary), vocabulary {len(self.vocab)}, "
                 f"{self.train_data.numel():,} training tokens in {t.batch_size} streams")
        self.log(f"source: {source_revision()}")  # at every start, so a resume on other code shows
        if resume:
            self._restore(self.ckpt_dir / "last.pt")
        # after the restore's checks: a refused resume leaves the directory's record as it was
        self.vocab.save(self.model_dir / "vocab.txt")
        save_config(config, self.model_dir / "config.yaml")

    # -- the loop's parts ----------------------------------------------------------
    def epoch_units(self, epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The (inputs, targets) segments of the training streams, in order."""
        return list(lm_data.segments(self.train_data, self.config.training.bptt))

    def train_on(self, segment: tuple[torch.Tensor, torch.Tensor]) -> tuple[float, int]:
        tokens, targets = segment
        state = self.stream_state or self.model.initial_state(self.config.training.batch_size)
        nll, self.stream_state = self._update(tokens, targets, state)
        return nll, targets.numel()

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

    def epoch_ended(self) -> None:
        self.stream_state = None  # the next epoch starts at the text's start

    def log_window(self, window: Window) -> None:
        p = self.progress
        self.log(f"update {p.update}: train ppl {math.exp(window.loss / window.tokens):.2f}, "
                 f"lr {self.schedule.lr(p.update):.2e}, {p.elapsed / 60:.1f} min")

    def evaluate(self) -> dict[str, float]:
        ppl = perplexity(self.model, self.dev)
        self.log(f"validation at update {self.progress.update}: dev ppl {ppl:.2f}")
        return {"ppl": ppl}

    def best_so_far(self) -> float | None:
        return self.progress.best_ppl

    def keep_best(self, scores: dict[str, float]) -> None:
        self.progress.best_ppl = scores["ppl"]

    def record(self) -> dict:
        return {**asdict(self.progress), "source": source_revision()}

    # -- checkpoints -----------------------------------------------------------
    def save(self, *names: str) -> None:
        """best.pt holds the model; last.pt also what a resumed run goes on from."""
        for name in names:
            extra = {} if name == "best.pt" else {
                "optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict(),
                "rng": rng_state(self.device), "stream_state": self.stream_state, "window": self.window.state()}
            save_model_checkpoint(self.ckpt_dir / name, {
                "model": self.model.state_dict(),
                "model_config": asdict(self.config.model),
                "vocab": self.vocab.fingerprint(),
                "progress": asdict(self.progress),
                **extra,
            })

    def _check_streams(self, path) -> None:
        """The saved stream state and the epoch's position count streams of batch_size and
        segments of bptt tokens: with others they point elsewhere, or do not fit."""
        saved = self.model_dir / "config.yaml"
        if not saved.is_file():
            return
        trained = read_raw(saved)
        for key in ("batch_size", "bptt"):
            was, now = lookup(trained, f"training.{key}"), getattr(self.config.training, key)
            if was is not None and was != now:
                raise CheckpointError(f"{path}: was trained with training.{key} {was} ({saved}), not {now}; "
                                      f"resume with the same, or train afresh in another model_dir")

    def _restore(self, path) -> None:
        payload = load_model_checkpoint(path)
        if "optimizer" not in payload:
            raise CheckpointError(f"{path}: holds no training state to resume from")
        check_trained_as(payload, path, self.config, self.vocab, self.model_dir / "config.yaml")
        self._check_streams(path)
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.schedule.load_state_dict(payload["schedule"])
        self.progress = LMProgress(**{**payload["progress"], "stopped": ""})  # a new budget may let it go on
        self.stream_state = payload["stream_state"]
        self.restore_window(payload)
        set_rng_state(payload["rng"], self.device)
        self.log(f"resumed from {path} at update {self.progress.update} (epoch {self.progress.epoch + 1})")
