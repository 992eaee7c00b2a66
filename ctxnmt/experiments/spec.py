"""The experiment file: named systems compared under one budget against a baseline.

    name: bible-small
    baseline: baseline
    budget: {updates: 500, seeds: [1234]}
    overrides: ["training.valid_every=250"]        # shared by every trained system
    systems:
      - {name: baseline, config: configs/rnnsearch-small.yaml}
      - {name: mean-residual, config: configs/mean-residual-small.yaml, overrides: ["training.lr=0.002"]}
      - {name: rule-based, output: outputs/rule-based.en}   # an external system's test output

`task: language-model` makes the systems language models (LM configs), compared by test
perplexity; they are all trained here.

Every key is a dataclass field, parsed with the config module's coercion, so an
unknown key is an error naming it and the closest valid one.  Paths are relative
to the working directory, as in config files.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxnmt.config import LANGUAGE_MODEL, TASK_NAMES, TRANSLATION, build_section, read_yaml_mapping
from ctxnmt.errors import ConfigError
from ctxnmt.evaluation.metrics import METRICS
from ctxnmt.evaluation.significance import TESTS

DEFAULT_SEEDS = (1234,)
# Names become directory names and report rows.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# The config key each budget kind sets; the other two are zeroed so that a
# limit left in a system's config cannot cut one system's training short.
BUDGET_KEYS = {"updates": "training.max_updates", "minutes": "training.max_minutes",
               "epochs": "training.max_epochs"}


@dataclass
class Budget:
    """The same training budget for every system: one of updates, minutes or epochs."""

    updates: int = 0
    minutes: float = 0.0
    epochs: int = 0
    seeds: list[int] = field(default_factory=list)

    def kind(self) -> str:
        return next(kind for kind in BUDGET_KEYS if getattr(self, kind))

    def overrides(self) -> list[str]:
        """``key=value`` strings: the chosen limit first, then the other two set to 0."""
        chosen = self.kind()
        value = getattr(self, chosen)
        limit = [f"{BUDGET_KEYS[chosen]}={value:g}" if isinstance(value, float) else f"{BUDGET_KEYS[chosen]}={value}"]
        return limit + [f"{BUDGET_KEYS[kind]}=0" for kind in BUDGET_KEYS if kind != chosen]

    def describe(self) -> str:
        kind = self.kind()
        return f"{getattr(self, kind):g} {kind}"


@dataclass
class SystemSpec:
    """A trained system (a config plus overrides), an ensemble of trained systems, or an
    external output file."""

    name: str = ""
    config: str = ""
    overrides: list[str] = field(default_factory=list)
    # detokenised test-set output of a system trained elsewhere; with {seed} in the path, one
    # per seed of the experiment (paired seed by seed with the trained systems)
    output: str = ""
    seeds: list[int] = field(default_factory=list)  # a subset of the experiment's seeds; default all
    ensemble: list[str] = field(default_factory=list)  # trained systems decoded together, seed by seed

    @property
    def external(self) -> bool:
        return bool(self.output)

    @property
    def trained(self) -> bool:
        return bool(self.config)

    def output_paths(self, seeds: list[int]) -> dict[int | None, str]:
        """An external system's output file by seed: one per seed where its path names {seed},
        else one for every seed (None)."""
        if SEED_FIELD not in self.output:
            return {None: self.output}
        return {seed: self.output.replace(SEED_FIELD, str(seed)) for seed in seeds}


SEED_FIELD = "{seed}"


@dataclass
class SignificanceSpec:
    """Which paired test compares each system with the baseline, on which test-set metric."""

    test: str = "ar"  # two-sided; sacreBLEU's bootstrap p-value is in effect one-sided (significance.DESCRIPTIONS)
    metric: str = "bleu"
    samples: int = 0  # 0 = the test's default (1000 bootstrap resamples, 10000 AR trials)
    seed: int = 12345


@dataclass
class Experiment:
    name: str = ""
    task: str = TRANSLATION  # one of TASK_NAMES
    out_dir: str = ""  # default runs/exp/{name}
    baseline: str = ""
    budget: Budget = field(default_factory=Budget)
    seeds: list[int] = field(default_factory=list)  # may be given here instead of under budget
    overrides: list[str] = field(default_factory=list)
    systems: list[SystemSpec] = field(default_factory=list)
    significance: SignificanceSpec = field(default_factory=SignificanceSpec)

    @property
    def root(self) -> Path:
        return Path(self.out_dir or f"runs/exp/{self.name}")

    @property
    def run_seeds(self) -> list[int]:
        return list(self.budget.seeds or self.seeds or DEFAULT_SEEDS)

    def system(self, name: str) -> SystemSpec:
        return next(s for s in self.systems if s.name == name)

    @property
    def trained(self) -> list[SystemSpec]:
        return [s for s in self.systems if s.trained]

    @property
    def ensembles(self) -> list[SystemSpec]:
        return [s for s in self.systems if s.ensemble]

    def seeds_of(self, system: SystemSpec) -> list[int]:
        """A trained system's seeds; an ensemble's are those every member has."""
        if system.ensemble:
            members = [self.seeds_of(self.system(name)) for name in system.ensemble]
            return [seed for seed in members[0] if all(seed in m for m in members)]
        return list(system.seeds or self.run_seeds)


def from_dict(raw: dict[str, Any]) -> Experiment:
    experiment = build_section(Experiment, raw)
    validate(experiment)
    if experiment.task == LANGUAGE_MODEL and "metric" in (raw.get("significance") or {}):
        raise ConfigError("significance.metric: a language-model experiment tests perplexity, the only metric")
    return experiment


def load_experiment(path: str | Path) -> Experiment:
    """Read and check an experiment file; every error names the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"experiment file not found: {path}")
    raw = read_yaml_mapping(path, "an experiment file must be a mapping")
    try:
        return from_dict(raw)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def validate(e: Experiment) -> None:
    if not _NAME.match(e.name):
        raise ConfigError(f"experiment 'name' must be a plain name (letters, digits, . _ + -), got {e.name!r}")
    if e.task not in TASK_NAMES:
        raise ConfigError(f"task must be {' or '.join(TASK_NAMES)}, got {e.task!r}")
    _validate_systems(e)
    if e.task == LANGUAGE_MODEL and e.significance.test != "ar":
        raise ConfigError(f"significance.test: a language-model experiment tests by approximate randomisation "
                          f"(ar), got {e.significance.test!r}")
    _validate_budget(e)
    _validate_overrides("overrides", e.overrides)
    if e.significance.test not in TESTS:
        raise ConfigError(f"significance.test must be one of {', '.join(TESTS)}, got {e.significance.test!r}")
    if e.significance.metric not in METRICS:
        raise ConfigError(f"significance.metric must be one of {', '.join(METRICS)}, got {e.significance.metric!r}")
    if e.significance.samples < 0 or e.significance.seed <= 0:
        raise ConfigError("significance.samples must be >= 0 and significance.seed positive")


def _validate_systems(e: Experiment) -> None:
    if not e.systems:
        raise ConfigError("an experiment needs a 'systems' list")
    names = [s.name for s in e.systems]
    for i, s in enumerate(e.systems):
        where = f"systems[{i}]"
        if not _NAME.match(s.name):
            raise ConfigError(f"{where}.name must be a plain name (letters, digits, . _ + -), got {s.name!r}")
        if names.count(s.name) > 1:
            raise ConfigError(f"system name '{s.name}' is used more than once")
        if bool(s.config) + bool(s.output) + bool(s.ensemble) != 1:
            raise ConfigError(f"system '{s.name}' needs exactly one of 'config' (to train), 'ensemble' (trained "
                              "systems decoded together) or 'output' (external)")
        if e.task == LANGUAGE_MODEL and not s.trained:
            raise ConfigError(f"system '{s.name}': a language-model experiment trains every system; 'output' and "
                              "'ensemble' are a translation experiment's")
        if "{" in s.output.replace(SEED_FIELD, "") or "}" in s.output.replace(SEED_FIELD, ""):
            raise ConfigError(f"{where}.output may name the seed as {SEED_FIELD} and nothing else in braces, "
                              f"got {s.output!r}")
        if not s.trained and (s.overrides or s.seeds):
            raise ConfigError(f"system '{s.name}' is not trained here; it takes no overrides or seeds")
        for member in s.ensemble:
            if member not in names or not e.system(member).trained:
                raise ConfigError(f"{where}.ensemble: '{member}' is not a trained system of this experiment")
        extra = [seed for seed in s.seeds if seed not in e.run_seeds]
        if extra or len(set(s.seeds)) != len(s.seeds):
            raise ConfigError(f"{where}.seeds must be distinct seeds of the experiment ({e.run_seeds}), "
                              f"got {s.seeds}")
        _validate_overrides(f"{where}.overrides", s.overrides)
    if e.baseline not in names:
        raise ConfigError(f"baseline '{e.baseline}' is not one of the systems ({', '.join(names)})")
    if not e.trained:
        raise ConfigError("an experiment needs at least one system with a 'config' (its data section names the "
                          "test set)")


def _validate_budget(e: Experiment) -> None:
    b = e.budget
    chosen = [kind for kind in BUDGET_KEYS if getattr(b, kind)]
    if len(chosen) != 1 or any(getattr(b, kind) < 0 for kind in BUDGET_KEYS):
        raise ConfigError("budget needs exactly one positive limit: updates, minutes or epochs")
    if b.seeds and e.seeds:
        raise ConfigError("give 'seeds' either under 'budget' or at the top level, not both")
    seeds = e.run_seeds
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must be distinct, got {seeds}")


def _validate_overrides(where: str, overrides: list[str]) -> None:
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"{where}: expected 'key=value', got {item!r}")
