"""The training log: each line dated in the model directory's train.log and, unless quiet,
on stderr (ctxnmt.utils.messages); scalars to TensorBoard where it is installed.  Silent
on ranks other than 0 (`enabled=False`).  And its reader: the validations, starts and
resumes a train.log shows."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from ctxnmt.errors import DataError
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


_VALIDATION = re.compile(r"validation at update (\d+) \((\d+) target tokens\): (.*)$")
_START = re.compile(r"^\S+ \S+ (?:model|LM): [\d,]+ parameters")  # both trainers log their model at every start
_RESUME = re.compile(r"resumed from .* at update (\d+) \(")
NOT_INTERRUPTED = "none"  # what a run's interruptions read when its log shows no resume or restart


@dataclass
class Validation:
    update: int
    tokens: int
    scores: dict[str, float]


def training_log(model_dir: Path) -> tuple[Path, list[str]]:
    log = Path(model_dir) / "train.log"
    if not log.is_file():
        raise DataError(f"{log}: no training log (is {model_dir} a model directory?)")
    # a line cut mid-character by a kill must not hide the rest of the log
    return log, log.read_text(encoding="utf-8", errors="replace").splitlines()


def read_validations(model_dir: Path) -> list[Validation]:
    """Every logged validation of a run, in update order; a resumed run's repeats count once."""
    log, lines = training_log(model_dir)
    found: dict[int, Validation] = {}
    for number, line in enumerate(lines, 1):
        match = _VALIDATION.search(line)
        if match:
            try:
                scores = {k: float(v) for k, v in (item.split() for item in match.group(3).split(", "))}
            except ValueError:
                raise DataError(f"{log}, line {number}: unreadable validation scores {match.group(3)!r}") from None
            found[int(match.group(1))] = Validation(int(match.group(1)), int(match.group(2)), scores)
    if not found:
        raise DataError(f"{log}: no validation logged yet")
    return [found[u] for u in sorted(found)]


@dataclass
class Starts:
    """How often a run's training was started: `resumed_at` the updates it resumed from `last.pt`
    at; `fresh_restarts` the starts from update 0 after the first (no `last.pt` was there)."""
    resumed_at: list[int]
    fresh_restarts: int

    @property
    def interrupted(self) -> bool:
        return bool(self.resumed_at or self.fresh_restarts)

    def describe(self) -> str:
        parts = [f"resumed at {', '.join(f'{u:,}' for u in self.resumed_at)}"] if self.resumed_at else []
        if self.fresh_restarts:
            parts.append(f"restarted from update 0 {self.fresh_restarts}×")
        return "; ".join(parts) or NOT_INTERRUPTED


def read_starts(model_dir: Path) -> Starts:
    """The resumes and restarts a run's train.log shows.  A restart on another machine whose
    log did not survive leaves no trace here."""
    starts, resumed = 0, []
    for line in training_log(model_dir)[1]:
        starts += bool(_START.search(line))
        match = _RESUME.search(line)
        if match:
            resumed.append(int(match.group(1)))
    return Starts(resumed, max(starts - 1 - len(resumed), 0))


def logged_interruptions(model_dir: Path) -> str:
    """What the run's train.log shows of its resumes and restarts; `not recorded` for a run
    copied without its log."""
    try:
        return read_starts(model_dir).describe()
    except DataError:
        return "not recorded"
