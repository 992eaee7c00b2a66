"""Training several runs, as `ctxnmt experiment` and `ctxnmt lm compare` do: the state of
each run's model directory, and training the unfinished runs one after the other or up to
`jobs` at once, each in a process of its own (ctxnmt.utils.processes).

A model directory is trusted only if the config saved in it is the run's: a run is never
mixed with one trained under other settings, and a finished run is never trained again.
"""
from __future__ import annotations

import copy
import enum
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from ctxnmt.config import read_yaml_mapping
from ctxnmt.errors import CheckpointError, ConfigError
from ctxnmt.models.migrations import DEFINITIONS, directory_definitions, upgrade_model_config
from ctxnmt.utils.io import atomic_write
from ctxnmt.utils.messages import Log
from ctxnmt.utils.processes import check_jobs, run_side_by_side
from ctxnmt.utils.selectors import label


T = TypeVar("T")


class RunState(enum.Enum):
    FRESH = "fresh"  # nothing to go on from: training starts
    RESUME = "resume"  # last.pt beside the run's config: training goes on from it
    TRAINED = "trained"  # training finished (done.json), but not what follows it (a language model's scores)
    DONE = "done"

    @property
    def doing(self) -> str:
        return {RunState.FRESH: "training", RunState.RESUME: "resuming from its last checkpoint",
                RunState.TRAINED: "scoring its finished training", RunState.DONE: "already trained"}[self]


def saved_as_trained(saved: Path, record: str, rewrite: bool = True) -> dict[str, Any]:
    """The raw config a run directory saved (its config.yaml), its model section restated in
    today's names where the run was trained under older definitions (as its record `record`
    or its checkpoints say): a run whose model's name has since come to mean another
    computation then differs from a plan that names the new one, instead of passing for it.
    A finished run so restated is rewritten in today's names (`restate`) unless not
    `rewrite` (a dry run, which only looks)."""
    raw = read_yaml_mapping(saved, "not a mapping of config sections")
    written = directory_definitions(saved.parent, record)
    if written is None or written >= DEFINITIONS or not isinstance(raw.get("model"), dict):
        return raw
    model = copy.deepcopy(raw["model"])
    try:
        upgrade_model_config(model, written, saved.parent)
    except CheckpointError as err:
        raise ConfigError(str(err)) from None
    if model == raw["model"]:
        return raw
    raw = {**raw, "model": model}
    if rewrite and (saved.parent / "done.json").is_file():
        restate(saved.parent, raw)
    return raw


def restate(directory: Path, raw: dict[str, Any]) -> None:
    """Rewrite a finished run's config.yaml in today's names and stamp its records (done.json,
    results.json) with today's definitions, so that what loads it (translation and scoring,
    which compare config.yaml with the checkpoint, itself restated when loaded) and any copy
    of its small files read the computation it was trained with.  Only a finished run: one
    still training may belong to another process (perhaps an older checkout), and resuming
    rewrites config.yaml anyway."""
    with atomic_write(directory / "config.yaml", "w") as fh:
        yaml.safe_dump(raw, fh, sort_keys=False)
    for name in ("done.json", "results.json"):
        path = directory / name
        try:
            stated = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(stated, dict):
            with atomic_write(path, "w") as fh:
                json.dump({**stated, "definitions": DEFINITIONS}, fh, indent=1)


def directory_state(directory: Path, difference: Callable[[Path], str], where: str, finished: str = "done.json"
              ) -> RunState:
    """The state of a run's model directory; `difference(config.yaml)` says how the config saved
    there differs from the run's ("": it does not), which is an error naming `where` the run's
    config comes from.  The run is DONE when the file `finished` is there."""
    saved = directory / "config.yaml"
    done = (directory / "done.json").is_file()
    last = (directory / "checkpoints" / "last.pt").is_file()
    if not saved.is_file():
        if done or last:
            raise ConfigError(f"{directory}: has checkpoints but no config.yaml; cannot tell how it was trained")
        return RunState.FRESH
    differs = difference(saved)
    if differs:
        raise ConfigError(f"{directory} was trained with a different config: {differs} in {where}")
    if (directory / finished).is_file():
        return RunState.DONE
    if done:  # stopped where an uninterrupted run stops: only what follows training is missing
        return RunState.TRAINED
    return RunState.RESUME if last else RunState.FRESH


@dataclass(frozen=True)
class PlannedRun:
    label: str  # "SYSTEM seed N", as the log names it
    directory: Path
    state: RunState
    threads: int  # its training.threads (0: every core)
    train: Callable[..., Any]  # a module-level function: it may run in a process of its own
    args: tuple


def train_unfinished(runs: list[PlannedRun], jobs: int, log: Log, before: Callable[[], None] | None = None) -> None:
    """Train the runs that are not DONE, in order, or up to `jobs` at once (each in its own
    process); `before()` runs first when there is any to train."""
    check_jobs(jobs, max((run.threads for run in runs), default=1), log)
    for run in runs:
        if run.state is RunState.DONE:
            log(f"{run.label}: already trained in {run.directory}")
    todo = [run for run in runs if run.state is not RunState.DONE]
    if todo and before is not None:
        before()
    for run in todo:
        log(f"{run.label}: {run.state.doing} in {run.directory}")
        if jobs == 1:
            run.train(*run.args)
    if jobs > 1 and todo:
        run_side_by_side([(run.label, run.train, run.args) for run in todo], jobs, log)


def split_for_report(runs: list[T], state: Callable[[T], RunState], key: Callable[[T], tuple[str, int]],
                     selected: list[T] | None, log: Log) -> tuple[list[T], list[str], list[str]]:
    """The finished runs, in order; the NAME:SEED of those still training; and the
    "NAME:SEED (why)" of those left out.  `key` gives a run's (name, seed), as for `--only`
    selectors.

    With `selected` (the runs an --only process trains) the other runs belong to other
    processes, perhaps on a newer checkout whose configs carry keys this one does not
    know: one whose directory disagrees with this process's plan is left out of the
    report with its reason, so that hours of training still end in a report that names
    what it lacks.  A selected run's disagreement, or any run's without `selected`, stops
    the command."""
    mine = None if selected is None else {key(run) for run in selected}
    finished, waiting, left_out = [], [], []
    for run in runs:
        try:
            current = state(run)
        except ConfigError as err:
            if mine is None or key(run) in mine:
                raise
            log(f"left out of the report: {label(key(run))}: {err}")
            left_out.append(f"{label(key(run))} ({err})")
            continue
        if current is RunState.DONE:
            finished.append(run)
        else:
            waiting.append(label(key(run)))
    return finished, waiting, left_out


def add_arguments(parser, run: str, report: str) -> None:
    """--only, --report and --jobs of a command that trains several runs; `run` is how a run is
    named (SYSTEM[:SEED]), `report` what --report reports."""
    parser.add_argument("--only", action="append", metavar=run,
                        help="train only these runs (repeatable), then report every finished run: lets two "
                             "processes train different runs side by side")
    parser.add_argument("--report", action="store_true", help=f"train nothing: {report}")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="train up to N runs at once, each in its own process with the config's "
                             "training.threads (default 1: one after the other)")


def check_arguments(args) -> None:
    if args.only and args.report:
        raise ConfigError("--only trains runs and --report trains none: give one of them")
