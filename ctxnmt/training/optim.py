"""Optimisers and the learning-rate schedule (linear warm-up, decay on plateau, and an
optional linear cool-down to zero at the end of a fixed budget of updates)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ctxnmt.training.settings import LoopConfig


def build_optimizer(params, cfg: LoopConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "adadelta":
        # dl4mt's setting: ρ = 0.95, ε = 1e-6 (lr 1.0 is the usual choice with it).
        return torch.optim.Adadelta(params, lr=cfg.lr, rho=0.95, eps=1e-6)
    return torch.optim.Adam(params, lr=cfg.lr)


@dataclass
class PlateauSchedule:
    """lr = base · warm-up factor · decay^k · cool-down factor, where k counts validations
    that failed to improve the metric `lr_patience` times in a row.  The cool-down (ours,
    for budgets fixed in advance such as the demo's) takes the last `cooldown` of `total`
    updates linearly to zero, as the trapezoidal ("warm-up, stable, decay") schedules do:
    a run whose length is known need not wait for a plateau to anneal."""

    base_lr: float
    warmup: int
    decay: float
    patience: int
    min_lr: float
    higher_is_better: bool
    scale: float = 1.0
    total: int = 0
    cooldown: int = 0
    best: float | None = None
    bad: int = 0

    def lr(self, update: int) -> float:
        warm = min(1.0, (update + 1) / self.warmup) if self.warmup else 1.0
        return max(self.base_lr * self.scale, self.min_lr) * warm * self.cooldown_factor(update)

    def cooldown_factor(self, update: int) -> float:
        """1 until the cool-down starts, then falling linearly so that the budget's last
        update runs at 1/cooldown of the rate (update counts from 0)."""
        if not self.cooldown:
            return 1.0
        return min(1.0, (self.total - update) / self.cooldown)

    def is_better(self, value: float, than: float | None) -> bool:
        return than is None or (value > than if self.higher_is_better else value < than)

    def observe(self, value: float) -> bool:
        """Record a validation metric; returns True if it is the best so far."""
        if self.is_better(value, self.best):
            self.best, self.bad = value, 0
            return True
        self.bad += 1
        if self.decay < 1.0 and self.bad % max(1, self.patience) == 0:
            self.scale *= self.decay
        return False

    @property
    def at_floor(self) -> bool:
        """Decayed down to min_lr (not merely started there)."""
        return self.scale < 1.0 and self.base_lr * self.scale <= self.min_lr

    def state_dict(self) -> dict:
        # the budget and its cool-down come from the config a run resumes with, not the checkpoint
        return {k: v for k, v in asdict(self).items() if k not in ("total", "cooldown")}

    def load_state_dict(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)


def plateau_stop(schedule: PlateauSchedule, patience: int, stop_at_min_lr: bool, metric: str) -> str:
    """Why to stop after a validation, or "": `patience` validations without a better
    `metric`, or (fairseq's --stop-min-lr) a learning rate decayed to its floor, where a
    run can creep forward by hundredths of a perplexity point for hours."""
    if patience and schedule.bad >= patience:
        return f"no improvement of dev {metric} in {patience} validations"
    if stop_at_min_lr and schedule.at_floor:
        return f"the learning rate decayed to min_lr ({schedule.min_lr:g})"
    return ""


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
