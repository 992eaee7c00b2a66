"""The training log: each line dated in the model directory's train.log and, unless quiet,
on stderr (ctxnmt.utils.messages); scalars to TensorBoard where it is installed.  Silent
on ranks other than 0 (`enabled=False`)."""
from __future__ import annotations

import time
from pathlib import Path

from ctxnmt.utils.messages import to_stderr


def score_text(value: float | None) -> str:
    """A dev score (BLEU, chrF or perplexity) as the validation lines give it: two decimals;
    'none' before any validation."""
    return "none" if value is None else f"{value:.2f}"


class TrainingLog:
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
            to_stderr(message)

    def scalar(self, name: str, value: float, step: int) -> None:
        if self.tb is not None:
            self.tb.add_scalar(name, value, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
