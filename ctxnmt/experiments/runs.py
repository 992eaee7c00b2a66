"""Training runs of an experiment: one model directory per trained system and seed, of
either task (translation, or a language model).

A run's effective config is its system's config file with, in this order, the
experiment's shared overrides, the system's own, the budget, the seed and the
model directory.  A model directory is trusted only if the config saved in it is
exactly that effective config, so an experiment never mixes runs trained under
different settings, and a finished run is never trained again.
"""
from __future__ import annotations

import copy
import dataclasses
import enum
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ctxnmt.analysis.curves import last_quarter_gain
from ctxnmt.config import TRANSLATION, config_dict, config_difference, override, read_yaml_mapping
from ctxnmt.data.prepare import prepare
from ctxnmt.errors import CheckpointError, ConfigError, DataError
from ctxnmt.experiments.spec import Experiment, SystemSpec
from ctxnmt.models.migrations import DEFINITIONS, directory_definitions, upgrade_model_config
from ctxnmt.tasks.registry import TASKS
from ctxnmt.training.log import logged_interruptions, read_validations
from ctxnmt.utils.io import atomic_write, read_json_object
from ctxnmt.utils.lock import waiting_for
from ctxnmt.utils.selectors import select

# Settings that change only speed or logging, not what a run learns: a finished run
# stays valid when they differ (e.g. it was trained with one thread beside another run).
SPEED_ONLY = ("training.threads", "training.log_every")
# Where a run was trained is not what it learned: an experiment directory may be moved
# or reached through a link, and its runs stay valid.
NOT_COMPARED = (*SPEED_ONLY, "model_dir", "name")  # a config's name is a label
PREP_LOCK = ".prep.lock"


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


@dataclass
class Run:
    system: str
    seed: int
    config_path: str
    overrides: list[str]  # every --set given to the task's train command, in order
    config: Any  # the task's config
    task: str = TRANSLATION

    @property
    def model_dir(self) -> Path:
        return Path(self.config.model_dir)


def plan_run(experiment: Experiment, system: SystemSpec, seed: int) -> Run:
    directory = experiment.root / "systems" / system.name / f"seed{seed}"
    overrides = [*experiment.overrides, *system.overrides, *experiment.budget.overrides(),
                 override("training.seed", seed), override("model_dir", str(directory))]
    try:
        config = TASKS[experiment.task].load(system.config, overrides)
    except ConfigError as err:
        raise ConfigError(f"system '{system.name}': {err}") from None
    return Run(system.name, seed, system.config, overrides, config, experiment.task)


def plan_runs(experiment: Experiment) -> list[Run]:
    """Every trained system × its seeds, in the experiment's order."""
    runs = [plan_run(experiment, system, seed) for system in experiment.trained for seed in experiment.seeds_of(system)]
    TASKS[experiment.task].check_runs(runs)
    return runs


def run_key(run: Run) -> tuple[str, int]:
    return run.system, run.seed


def select_runs(runs: list[Run], selectors: list[str]) -> list[Run]:
    """The runs named by `SYSTEM` (all its seeds) or `SYSTEM:SEED` selectors; an unknown one is an error."""
    return select(runs, selectors, run_key, "experiment")


def run_state(run: Run, rewrite: bool = True) -> RunState:
    """DONE, TRAINED (a language model not yet scored), RESUME or FRESH; a directory trained
    under another config is an error.  A finished run trained under older definitions is
    rewritten in today's names unless not `rewrite` (`saved_as_trained`)."""
    task = TASKS[run.task]

    def difference(saved_path: Path) -> str:
        try:
            saved = config_dict(task.from_dict(saved_as_trained(saved_path, task.finished, rewrite)))
        except ConfigError as err:
            raise ConfigError(f"{run.model_dir}: its config.yaml no longer loads ({err})") from None
        return config_difference(saved, config_dict(run.config), ignore=NOT_COMPARED)

    directory = run.model_dir
    done, last = ((directory / name).is_file() for name in ("done.json", "checkpoints/last.pt"))
    if not (directory / "config.yaml").is_file():
        if done or last:
            raise ConfigError(f"{directory}: has checkpoints but no config.yaml; cannot tell how it was trained")
        return RunState.FRESH
    differs = difference(directory / "config.yaml")
    if differs:
        raise ConfigError(f"{directory} was trained with a different config: {differs} in this experiment; "
                          "use another out_dir or delete that directory")
    if (directory / task.finished).is_file():
        return RunState.DONE
    if done:  # stopped where an uninterrupted run stops: only what follows training is missing
        return RunState.TRAINED
    return RunState.RESUME if last else RunState.FRESH


def shared_data(runs: list[Run]) -> bool:
    """Whether one preprocessing serves every run (a task that prepares, equal data sections)."""
    return TASKS[runs[0].task].shares_preparation and all(run.config.data == runs[0].config.data for run in runs)


def prepare_shared(experiment: Experiment, runs: list[Run], log) -> None:
    """Prepare the data once in {out_dir}/prep and give each run that lacks one a copy.

    The copy is exactly what `ctxnmt prepare` would write there (preprocessing
    depends only on the data section), so training finds it up to date.
    """
    todo = [run for run in runs if not (run.model_dir / "prep").exists()]
    if not todo:
        return
    with waiting_for(experiment.root / PREP_LOCK):  # two `--only` started together prepare it once
        shared = experiment.root / "prep"  # another process may have prepared it while this one waited
        log(f"{'checking' if shared.exists() else 'preparing'} the shared data in {shared}")
        prepare(dataclasses.replace(runs[0].config, model_dir=str(experiment.root)), log=log)
        for run in todo:
            if not (run.model_dir / "prep").exists():
                copy_tree_atomic(shared, run.model_dir / "prep")


def copy_tree_atomic(src: Path, dst: Path) -> None:
    """Copy a directory so that ``dst`` appears complete or not at all."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dst.parent, prefix=f".{dst.name}."))
    try:
        shutil.copytree(src, tmp, dirs_exist_ok=True)
        os.replace(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def train(run: Run, quiet: bool = False) -> None:
    """Train `run` from its state now, not as planned: the plan may be hours old, and another
    process (an --only beside this one) may have finished or begun the run since."""
    state = run_state(run)
    if state is not RunState.DONE:
        TASKS[run.task].train_run(run.config, state is RunState.RESUME, state is RunState.TRAINED, quiet)


def training_record(run: Run) -> dict[str, Any]:
    """What the trainer recorded in done.json, with the experiment's derived numbers."""
    done = read_json_object(run.model_dir / "done.json")
    elapsed = done.get("elapsed") or 0.0
    tokens_per_s = done.get("target_tokens_per_s") or (done.get("tokens", 0) / elapsed if elapsed else 0.0)
    scores = done.get("best_scores") or {}
    dev_bleu = scores.get("bleu")
    if dev_bleu is None and run.config.training.selection_metric == "bleu":
        dev_bleu = done.get("best_metric")  # a done.json written before best_scores existed
    try:
        gain = last_quarter_gain(read_validations(run.model_dir))
    except DataError:  # a run restored without its log, or one that never validated
        gain = None
    starts = logged_interruptions(run.model_dir)
    return {"updates": done.get("update"), "epochs": done.get("epoch"), "train_minutes": elapsed / 60,
            "last_quarter_gain": gain, "interruptions": starts,
            "train_tokens_per_s": tokens_per_s, "dev_bleu": dev_bleu, "stopped": done.get("stopped", ""),
            "source": done.get("source", "not recorded")}
