"""Training runs of an experiment: one model directory per trained system and seed.

A run's effective config is its system's config file with, in this order, the
experiment's shared overrides, the system's own, the budget, the seed and the
model directory.  A model directory is trusted only if the config saved in it is
exactly that effective config, so an experiment never mixes runs trained under
different settings, and a finished run is never trained again.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxnmt.analysis.curves import last_quarter_gain
from ctxnmt.config import Config, config_difference, from_dict, load_config, override, validate
from ctxnmt.data.prepare import prepare
from ctxnmt.errors import ConfigError, DataError
from ctxnmt.experiments.spec import Experiment, SystemSpec
from ctxnmt.models.nmt import check_names
from ctxnmt.training.log import logged_interruptions, read_validations
from ctxnmt.training.runs import RunState, directory_state, saved_as_trained
from ctxnmt.training.trainer import Trainer
from ctxnmt.training.translation import TranslationTask
from ctxnmt.utils.io import read_json_object
from ctxnmt.utils.selectors import select

# Settings that change only speed or logging, not what a run learns: a finished run
# stays valid when they differ (e.g. it was trained with one thread beside another run).
SPEED_ONLY = ("training.threads", "training.log_every")
# Where a run was trained is not what it learned: an experiment directory may be moved
# or reached through a link, and its runs stay valid.
NOT_COMPARED = (*SPEED_ONLY, "model_dir", "name")  # a config's name is a label


@dataclass
class Run:
    system: str
    seed: int
    config_path: str
    overrides: list[str]  # every --set given to `ctxnmt train`, in order
    config: Config

    @property
    def model_dir(self) -> Path:
        return Path(self.config.model_dir)


def model_dir(experiment: Experiment, system: str, seed: int) -> str:
    return str(experiment.root / "systems" / system / f"seed{seed}")


def plan_run(experiment: Experiment, system: SystemSpec, seed: int) -> Run:
    overrides = [*experiment.overrides, *system.overrides, *experiment.budget.overrides(),
                 override("training.seed", seed), override("model_dir", model_dir(experiment, system.name, seed))]
    try:
        config = load_config(system.config, overrides)
        check_names(config.model)
    except ConfigError as err:
        raise ConfigError(f"system '{system.name}': {err}") from None
    return Run(system.name, seed, system.config, overrides, config)


def plan_runs(experiment: Experiment) -> list[Run]:
    """Every trained system × its seeds, in the experiment's order."""
    return [plan_run(experiment, system, seed) for system in experiment.trained
            for seed in experiment.seeds_of(system)]


def run_key(run: Run) -> tuple[str, int]:
    return run.system, run.seed


def select_runs(runs: list[Run], selectors: list[str]) -> list[Run]:
    """The runs named by `SYSTEM` (all its seeds) or `SYSTEM:SEED` selectors; an unknown one is an error."""
    return select(runs, selectors, run_key, "experiment")


def run_state(run: Run, rewrite: bool = True) -> RunState:
    """DONE, RESUME or FRESH; a directory trained under another config is an error.  A
    finished run trained under older definitions is rewritten in today's names unless not
    `rewrite` (`saved_as_trained`)."""

    def difference(saved_path: Path) -> str:
        try:
            trained = from_dict(saved_as_trained(saved_path, "done.json", rewrite))
            validate(trained)
            saved = trained.to_dict()
        except ConfigError as err:
            raise ConfigError(f"{run.model_dir}: its config.yaml no longer loads ({err})") from None
        return config_difference(saved, run.config.to_dict(), ignore=NOT_COMPARED)

    return directory_state(run.model_dir, difference, "this experiment; use another out_dir or delete that directory")


def shared_data(runs: list[Run]) -> bool:
    """Whether one preprocessing serves every run (their data sections are equal)."""
    return all(run.config.data == runs[0].config.data for run in runs)


def prepare_shared(experiment: Experiment, runs: list[Run], log) -> None:
    """Prepare the data once in {out_dir}/prep and give each run that lacks one a copy.

    The copy is exactly what `ctxnmt prepare` would write there (preprocessing
    depends only on the data section), so training finds it up to date.
    """
    todo = [run for run in runs if not (run.model_dir / "prep").exists()]
    if not todo:
        return
    log(f"preparing the shared data in {experiment.root / 'prep'}")
    prepare(dataclasses.replace(runs[0].config, model_dir=str(experiment.root)), log=log)
    for run in todo:
        copy_tree_atomic(experiment.root / "prep", run.model_dir / "prep")


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
        Trainer(TranslationTask(run.config), resume=state is RunState.RESUME, quiet=quiet).train()


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
