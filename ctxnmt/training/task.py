"""A task: what a kind of model learns from and how it is judged (what fairseq calls a task).

The Trainer (ctxnmt.training.trainer) owns what every training has: the ranks, the device,
the optimiser, the learning-rate schedule, the precision, the progress record, the
checkpoint layout and exact resume.  A task supplies the rest: its data and model, an
epoch's units (one an update) and the loss of one, its dev scores and the metric that
selects best.pt, its log lines, what its checkpoints hold beyond the common part (and the
checks that refuse another run's), and its files in the model directory; and, to an
experiment (ctxnmt.experiments.runs), how a run of it loads, trains and finishes.
Translation (ctxnmt.tasks.translation) and language modelling (ctxnmt.tasks.language_model)
are the two tasks, named by a config's `task:` key (ctxnmt.tasks.registry).
The records they share, the progress and the log window, are here too.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ctxnmt.training.distributed import World
from ctxnmt.training.log import TrainingLog
from ctxnmt.training.optim import PlateauSchedule
from ctxnmt.training.precision import Precision


@dataclass
class Progress:
    """How far a run is: what checkpoints and done.json hold, and the budgets read."""
    epoch: int = 0
    position: int = 0  # units of the current epoch already trained on
    update: int = 0
    elapsed: float = 0.0  # seconds of training, validation excluded, across resumes
    tokens: int = 0  # target tokens trained on
    best_metric: float | None = None  # the best checkpoint's selecting dev score
    best_scores: dict[str, float] | None = None  # every dev score of the best checkpoint
    stopped: str = ""
    validation_due: bool = False  # stopped by a signal where a validation was due: it runs first on resume

    @classmethod
    def saved(cls, record: dict[str, Any]) -> Progress:
        """The progress a checkpoint or done.json holds, other keys left out.  Older records
        named the position `batch_in_epoch` (translation) or `segment` (the LM), whose
        records kept only `best_ppl`."""
        named = {OLD_NAMES.get(key, key): value for key, value in record.items()}
        if record.get("best_ppl") is not None:
            named.update(best_metric=record["best_ppl"], best_scores={"ppl": record["best_ppl"]})
        return cls(**{key: value for key, value in named.items() if key in cls.__dataclass_fields__})


OLD_NAMES = {"batch_in_epoch": "position", "segment": "position"}


@dataclass
class Window:
    """The training loss and target tokens since the last log line.  Checkpoints keep the
    sums, so that a resumed run logs the uninterrupted run's lines; `timed` counts only the
    tokens since `start` (this process), what a rate is measured on."""
    loss: float = 0.0
    tokens: int = 0
    start: float = field(default_factory=time.perf_counter)
    timed: int = 0

    def add(self, loss: float, tokens: int) -> None:
        self.loss += loss
        self.tokens += tokens
        self.timed += tokens


class Task(ABC):
    name: str = ""  # as a config's and an experiment's `task:` key names it
    finished: str = "done.json"  # an experiment's run is done once its directory holds this record
    kept: str = ""  # the record an exported run needs to stand in for the run (experiment --restore)
    command: tuple[str, ...] = ()  # the command that trains one run alone
    shares_preparation: bool = False  # whether an experiment's runs of equal data sections share {out_dir}/prep
    metric: str = "ppl"  # the dev score that selects best.pt
    metric_name: str = "ppl"  # its name in an early stop's reason
    higher_is_better: bool = False
    precision: str = "fp32"  # of the forward pass (ctxnmt.training.precision)
    unit: str = ""  # the name of an epoch's unit in the resume line ("": not named there)
    data_parallel: bool = False  # whether an update can be dealt to several ranks
    tensorboard: bool = False  # whether its scalars go to TensorBoard too

    def __init__(self, config):
        """`config`: the task's whole config; its `training` section is the Trainer's."""
        self.config = config
        self.training = config.training
        self.model_dir = Path(config.model_dir)

    # -- its config and its runs ---------------------------------------------------------
    @staticmethod
    @abstractmethod
    def load(path: str | Path | None, overrides: list[str]) -> Any:
        """The checked config of a config file with `--set` overrides."""

    @staticmethod
    @abstractmethod
    def from_dict(raw: dict[str, Any]) -> Any:
        """The checked config of a raw mapping (a model directory's saved config.yaml)."""

    @classmethod
    @abstractmethod
    def train_run(cls, config, resume: bool = False, trained: bool = False, quiet: bool = False) -> Any:
        """Train a run of `config` to its end, going on from last.pt where `resume`; `trained`:
        its training has finished (done.json), and only what follows it is left."""

    @classmethod
    def check_runs(cls, runs: Sequence) -> None:
        """Refuse an experiment's planned runs (each with its `system` and `config`) that cannot be compared."""

    # -- setting up ----------------------------------------------------------------------
    @abstractmethod
    def setup(self, world: World, device: torch.device, log: TrainingLog) -> torch.nn.Module:
        """Read (or prepare) the data, then build the model (on the CPU, from the torch
        generator as seeded); `log` is also the task's for its lines."""

    @abstractmethod
    def schedule(self) -> PlateauSchedule:
        """The learning-rate schedule the config sets."""

    def start(self, model: torch.nn.Module, precision: Precision) -> None:
        """The model on its device, restored where the run resumes: the updates may begin."""

    @abstractmethod
    def describe(self) -> str:
        """The model and data in one line, logged at every start."""

    # -- training ------------------------------------------------------------------------
    @abstractmethod
    def epoch_units(self, epoch: int, starting: bool) -> Sequence:
        """The units of `epoch`, one an update, a pure function of the seed and `epoch`;
        `starting`: the epoch begins (not a resumed run's middle of it), where a task logs
        it and state carried from unit to unit starts over."""

    @abstractmethod
    def backward(self, unit, update: int) -> tuple[float, int]:
        """The gradients of the loss of `unit`, the `update`-th update (the Trainer zeroes them
        before and steps after); this rank's summed loss and target tokens."""

    @abstractmethod
    def log_window(self, window: Window, progress: Progress, lr: float) -> None:
        """The log line of the updates since the last one."""

    @abstractmethod
    def evaluate(self, progress: Progress) -> dict[str, float]:
        """The dev scores (`metric` among them), logged."""

    # -- checkpoints and files -----------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What its checkpoints hold beyond the Trainer's part (vocabularies, carried state)."""
        return {}

    def check(self, payload: dict[str, Any], path: Path) -> None:
        """Refuse to resume from the checkpoint of another model, vocabulary or data layout."""

    def load_state(self, payload: dict[str, Any]) -> None:
        """Take back what `state` saved."""

    def write_files(self) -> None:
        """Its files in the model directory beside config.yaml (a vocabulary)."""
