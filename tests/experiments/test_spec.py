"""The experiment file: parsing, errors that name the key, and the effective-config contract."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ctxnmt.config import first_difference, load_config
from ctxnmt.errors import ConfigError
from ctxnmt.experiments.runs import plan_run, plan_runs
from ctxnmt.experiments.spec import from_dict, load_experiment

REPO = Path(__file__).resolve().parents[2]


def spec(**changes):
    raw = {"name": "cmp", "baseline": "base", "budget": {"updates": 500},
           "systems": [{"name": "base", "config": "configs/rnnsearch-small.yaml"},
                       {"name": "ext", "output": "out.en"}]}
    raw.update(changes)
    return raw


def test_defaults():
    e = from_dict(spec())
    assert e.root == Path("runs/exp/cmp")
    assert e.run_seeds == [1234]
    assert e.significance.test == "ar" and e.significance.metric == "bleu"  # two-sided: the bootstrap is not
    assert [s.name for s in e.trained] == ["base"] and e.system("ext").external


@pytest.mark.parametrize("budget, expected", [
    ({"updates": 500}, ["training.max_updates=500", "training.max_minutes=0", "training.max_epochs=0"]),
    ({"minutes": 12.5}, ["training.max_minutes=12.5", "training.max_updates=0", "training.max_epochs=0"]),
    ({"epochs": 3}, ["training.max_epochs=3", "training.max_updates=0", "training.max_minutes=0"]),
])
def test_budget_sets_one_limit_and_zeroes_the_others(budget, expected):
    assert from_dict(spec(budget=budget)).budget.overrides() == expected


def test_seeds_under_budget_or_top_level_but_not_both():
    assert from_dict(spec(budget={"updates": 5, "seeds": [1, 2]})).run_seeds == [1, 2]
    assert from_dict(spec(seeds=[3])).run_seeds == [3]
    with pytest.raises(ConfigError, match="not both"):
        from_dict(spec(budget={"updates": 5, "seeds": [1]}, seeds=[2]))


@pytest.mark.parametrize("changes, message", [
    ({"overides": []}, r"unknown config key 'overides'; did you mean 'overrides'\?"),
    ({"systems": [{"name": "base", "confg": "x.yaml"}]}, r"unknown config key 'systems\[0\]\.confg'"),
    ({"budget": {"update": 5}}, r"unknown config key 'budget\.update'; did you mean 'budget\.updates'"),
    ({"budget": {"updates": 5, "minutes": 3}}, "exactly one positive limit"),
    ({"budget": {}}, "exactly one positive limit"),
    ({"budget": {"updates": "many"}}, "'budget.updates' must be of type int"),
    ({"baseline": "nope"}, "baseline 'nope' is not one of the systems"),
    ({"systems": [{"name": "base", "config": "a.yaml", "output": "b"}]}, "exactly one of 'config'"),
    ({"systems": [{"name": "base", "config": "a.yaml"}, {"name": "base", "config": "b.yaml"}]}, "more than once"),
    ({"systems": [{"name": "base", "output": "b.en"}]}, "at least one system with a 'config'"),
    ({"systems": [{"name": "a/b", "config": "a.yaml"}]}, "plain name"),
    ({"systems": [{"name": "base", "config": "a.yaml"}, {"name": "ext", "output": "runs/s{run}/out.en"}]},
     r"systems\[1\]\.output may name the seed as \{seed\} and nothing else in braces, got 'runs/s\{run\}/out.en'"),
    ({"overrides": ["training.lr"]}, "expected 'key=value'"),
    ({"overrides": "training.lr=1"}, "'overrides' must be a list"),
    ({"systems": [{"name": "base", "config": "a.yaml", "seeds": 2}]}, r"'systems\[0\]\.seeds' must be a list, got 2"),
    ({"budget": 8000}, "config section 'budget' must be a mapping, got 8000"),
    ({"systems": ["base"]}, r"config section 'systems\[0\]' must be a mapping, got 'base'"),
    ({"significance": {"test": "wilcoxon"}}, "significance.test must be one of bootstrap, ar, ttest, sign"),
])
def test_bad_files_name_what_is_wrong(changes, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(spec(**changes))


def test_load_experiment_names_the_file(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(spec(sytems=[])))
    with pytest.raises(ConfigError, match=rf"^{path}: unknown config key 'sytems'; did you mean 'systems'"):
        load_experiment(path)


def test_effective_config_follows_the_contract(monkeypatch):
    monkeypatch.chdir(REPO)
    e = from_dict(spec(overrides=["training.valid_every=250"], out_dir="runs/x",
                       systems=[{"name": "base", "config": "configs/rnnsearch-small.yaml",
                                 "overrides": ["model.dropout_out=0.3"]}]))
    run = plan_run(e, e.systems[0], 7)
    expected_overrides = ["training.valid_every=250", "model.dropout_out=0.3", "training.max_updates=500",
                          "training.max_minutes=0", "training.max_epochs=0", "training.seed=7",
                          "model_dir=runs/x/systems/base/seed7"]
    assert run.overrides == expected_overrides
    assert run.config == load_config("configs/rnnsearch-small.yaml", expected_overrides)
    assert run.model_dir == Path("runs/x/systems/base/seed7")
    # the budget wins over the config file's own limit (max_minutes: 20 in rnnsearch-small.yaml)
    assert run.config.training.max_minutes == 0 and run.config.training.max_updates == 500


def test_runs_cover_every_trained_system_and_seed(monkeypatch):
    monkeypatch.chdir(REPO)
    e = from_dict(spec(seeds=[1, 2]))
    assert [(r.system, r.seed) for r in plan_runs(e)] == [("base", 1), ("base", 2)]


def test_bad_system_override_names_the_system(monkeypatch):
    monkeypatch.chdir(REPO)
    e = from_dict(spec(systems=[{"name": "base", "config": "configs/rnnsearch-small.yaml",
                                 "overrides": ["model.hiden_dim=3"]}]))
    with pytest.raises(ConfigError, match="system 'base': --set model.hiden_dim=3: unknown config key 'model.hiden_dim'"):
        plan_runs(e)


def test_first_difference_is_dotted_and_in_order():
    a = {"name": "x", "model": {"emb_dim": 4, "hidden_dim": 8}, "training": {"lr": 1}}
    b = {"name": "x", "model": {"emb_dim": 4, "hidden_dim": 9}, "training": {"lr": 2}}
    assert first_difference(a, b) == "model.hidden_dim"
    assert first_difference(a, a) is None


EXPERIMENT_FILES = sorted((REPO / "experiments").glob("*.yaml"))


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=[p.name for p in EXPERIMENT_FILES])
def test_shipped_experiment_files_parse(path):
    e = load_experiment(path)
    assert e.baseline in [s.name for s in e.systems]
    for system in e.trained:
        assert system.config.startswith("configs/") and system.config.endswith(".yaml")


def test_bible_small_is_the_main_cpu_comparison():
    e = load_experiment(REPO / "experiments" / "bible-small.yaml")
    assert e.budget.overrides()[0] == "training.max_updates=500" and e.run_seeds == [1234]
    assert e.overrides == ["training.valid_every=250"]
    assert e.baseline == "baseline" and e.system("baseline").config == "configs/rnnsearch-small.yaml"
    assert [s.name for s in e.systems] == ["baseline", "mean-residual", "self-attentive-residual", "bcae", "fcae",
                                           "adaptive-both", "doc-init-both-gated-aux"]


def test_a_system_may_run_a_subset_of_the_seeds(monkeypatch):
    monkeypatch.chdir(REPO)
    e = from_dict(spec(seeds=[1, 2, 3], systems=[
        {"name": "base", "config": "configs/rnnsearch-small.yaml"},
        {"name": "one", "config": "configs/rnnsearch-small.yaml", "seeds": [2]}]))
    assert [(r.system, r.seed) for r in plan_runs(e)] == [("base", 1), ("base", 2), ("base", 3), ("one", 2)]


@pytest.mark.parametrize("seeds", [[4], [1, 1]])
def test_system_seeds_outside_the_experiments_are_refused(seeds):
    with pytest.raises(ConfigError, match=r"systems\[0\]\.seeds must be distinct seeds of the experiment"):
        from_dict(spec(seeds=[1, 2], systems=[{"name": "base", "config": "c.yaml", "seeds": seeds}]))


def test_selectors_name_runs_and_unknown_ones_are_errors(monkeypatch):
    from ctxnmt.experiments.runs import select_runs

    monkeypatch.chdir(REPO)
    runs = plan_runs(from_dict(spec(seeds=[1, 2])))
    assert [(r.system, r.seed) for r in select_runs(runs, ["base:2"])] == [("base", 2)]
    assert [(r.system, r.seed) for r in select_runs(runs, ["base", "base:1"])] == [("base", 1), ("base", 2)]
    with pytest.raises(ConfigError, match=r"--only 'base:7' names no run of this experiment \(runs: base:1, base:2\)"):
        select_runs(runs, ["base:7"])


def test_an_ensemble_names_trained_systems_and_runs_the_seeds_they_share(monkeypatch):
    monkeypatch.chdir(REPO)
    e = from_dict(spec(seeds=[1, 2], systems=[
        {"name": "base", "config": "configs/rnnsearch-small.yaml"},
        {"name": "one", "config": "configs/rnnsearch-small.yaml", "seeds": [2]},
        {"name": "both", "ensemble": ["base", "one"]}]))
    assert e.seeds_of(e.system("both")) == [2] and [s.name for s in e.trained] == ["base", "one"]
    assert [(r.system, r.seed) for r in plan_runs(e)] == [("base", 1), ("base", 2), ("one", 2)]


@pytest.mark.parametrize("system, message", [
    ({"name": "e", "ensemble": ["base", "ext"]}, r"systems\[2\]\.ensemble: 'ext' is not a trained system"),
    ({"name": "e", "ensemble": ["nope"]}, r"systems\[2\]\.ensemble: 'nope' is not a trained system"),
    ({"name": "e", "ensemble": ["base"], "config": "c.yaml"}, "needs exactly one of 'config'"),
    ({"name": "e", "ensemble": ["base"], "seeds": [1234]}, "is not trained here; it takes no overrides or seeds"),
])
def test_bad_ensembles_are_refused(system, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(spec(systems=[*spec()["systems"], system]))


def test_every_task_name_has_its_task_and_its_report():
    """The names an experiment's `task:` is checked against are the registry's tasks and the runner's reports."""
    from ctxnmt.config import TASK_NAMES
    from ctxnmt.experiments.runner import REPORTS
    from ctxnmt.tasks.registry import TASKS
    assert list(TASKS) == list(REPORTS) == list(TASK_NAMES)
    with pytest.raises(ConfigError, match="task must be translation or language-model, got 'tagging'"):
        from_dict({"name": "x", "task": "tagging", "baseline": "a", "systems": [{"name": "a", "config": "c.yaml"}]})
