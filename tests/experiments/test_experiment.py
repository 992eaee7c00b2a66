"""A tiny two-system experiment (plus an external output) end to end: the report, its
reproduction commands, resuming, and refusing a model directory trained otherwise."""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import statistics
from pathlib import Path

import pytest
import torch
import yaml

from ctxnmt.cli import main
from ctxnmt.errors import DataError
from ctxnmt.evaluation.metrics import score_all
from ctxnmt.experiments.runner import run_experiment
from ctxnmt.experiments.spec import load_experiment
from ctxnmt.models.registry import TARGET_CONTEXTS

UPDATES = 20


def write_experiment(directory: Path, config: Path, external: Path, **changes) -> Path:
    raw = {"name": "tiny", "out_dir": "exp", "baseline": "base", "budget": {"updates": UPDATES},
           "overrides": ["training.valid_every=10"],
           "systems": [{"name": "base", "config": str(config)},
                       {"name": "mean", "config": str(config), "overrides": ["model.target_context=mean"]},
                       {"name": "dropper", "output": str(external)}]}
    raw.update(changes)
    path = directory / "tiny-experiment.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def drop_second_word(lines: list[str]) -> list[str]:
    return [" ".join(w for i, w in enumerate(line.split()) if i != 1) for line in lines]


@pytest.fixture(scope="module")
def finished(tiny_corpus, tiny_config, tmp_path_factory):
    """(working directory, experiment file, log) after one complete run with out_dir relative to it."""
    work = tmp_path_factory.mktemp("work")
    refs = (tiny_corpus / "test.en").read_text(encoding="utf-8").splitlines()
    external = work / "dropper.en"
    external.write_text("\n".join(drop_second_word(refs)) + "\n", encoding="utf-8")
    path = write_experiment(work, tiny_config, external)
    log: list[str] = []
    with chdir(work):
        run_experiment(load_experiment(path), log=log.append, quiet=True)
    return work, path, log


class chdir:
    """Relative out_dir: a copied experiment directory is the same experiment in another working directory."""

    def __init__(self, path: Path):
        self.path, self.old = path, None

    def __enter__(self):
        self.old = os.getcwd()
        os.chdir(self.path)

    def __exit__(self, *exc):
        os.chdir(self.old)


def report(work: Path) -> dict:
    return json.loads((work / "exp" / "report.json").read_text(encoding="utf-8"))


def row(data: dict, system: str) -> dict:
    return next(r for r in data["rows"] if r["system"] == system)


def digest(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def test_report_has_every_column_for_trained_systems(finished):
    work, _, log = finished
    data = report(work)
    assert [r["system"] for r in data["rows"]] == ["base", "mean", "dropper"]
    assert data["columns"] == ["system", "seeds", "parameters", "dev BLEU", "dev gain, last ¼",
                               "test BLEU (tokenised)", "test sacreBLEU", "chrF", "TER", "sig.", "all seeds: Δ, p",
                               "t-test over seeds: t, p", "smallest detectable Δ", "train tok/s", "decode sent/s",
                               "train min"]
    over_seeds = data["columns"].index("all seeds: Δ, p")
    for name in ("base", "mean"):
        cells = row(data, name)["cells"]
        assert len(cells) == len(data["columns"]) and cells[1] == "1"
        # one seed: nothing to pool or test over seeds (three columns), every other cell filled
        assert {cells[over_seeds], cells[over_seeds + 1], cells[over_seeds + 2]} <= {"", "–"}, cells
        assert "–" not in cells[:over_seeds] + cells[over_seeds + 3:], cells
        assert row(data, name)["mean"]["parameters"] > 1000
        assert row(data, name)["mean"]["train_tokens_per_s"] > 0 and row(data, name)["mean"]["sentences_per_s"] > 0
    assert row(data, "base")["cells"][data["columns"].index("sig.")] == "baseline"
    md = (work / "exp" / "report.md").read_text(encoding="utf-8")
    assert "| base | " in md and "| mean | " in md and "| dropper (external) | " in md
    assert "BLEU|nrefs:1" in md and "tok:13a" in md  # sacreBLEU signature
    assert (work / "exp" / "length-buckets.png").read_bytes()[:4] == b"\x89PNG"
    assert "| 0-9 |" in md and "dropper BLEU" in md  # length-bucket table
    source = json.loads((work / "exp" / "systems" / "base" / "seed1234" / "done.json").read_text())["source"]
    # the runs table names the source and, for a run started once, no interruption
    assert source and "| base | 1234 | " in md and f"| {source[:12]} | none |" in md
    csv_lines = (work / "exp" / "report.csv").read_text(encoding="utf-8").splitlines()
    assert csv_lines[0].startswith("system,external,seeds,parameters,parameters_sd,dev_bleu")
    assert len(csv_lines) == 4
    assert any("preparing the shared data" in line for line in log)


def test_reported_scores_are_the_outputs_scores(finished, tiny_corpus):
    work, _, _ = finished
    refs = (tiny_corpus / "test.en").read_text(encoding="utf-8").splitlines()
    hyps = (work / "exp/systems/mean/seed1234/test.hyp.en").read_text(encoding="utf-8").splitlines()
    scores = score_all(hyps, refs)
    mean = row(report(work), "mean")["mean"]
    for key in ("bleu", "bleu_tok", "chrf", "ter"):
        assert mean[key] == pytest.approx(scores[key].value)
    done = json.loads((work / "exp/systems/mean/seed1234/done.json").read_text())
    assert done["update"] == UPDATES and mean["dev_bleu"] == pytest.approx(done["best_scores"]["bleu"])


def test_external_output_is_scored_and_tested(finished):
    work, _, _ = finished
    dropper = row(report(work), "dropper")
    assert dropper["external"] and dropper["mean"]["bleu"] > 20
    assert dropper["mean"]["parameters"] is None and dropper["cells"][1] == dropper["cells"][2] == "–"
    # far better than two models trained for 20 updates
    assert dropper["significance"]["direction"] == "better" and dropper["significance"]["max_p"] < 0.05
    assert dropper["cells"][report(work)["columns"].index("sig.")].startswith("*")


def test_reproduction_commands_give_the_reported_numbers(finished, tmp_path, capsys):
    work, _, _ = finished
    base = row(report(work), "base")
    train, translate, score = (shlex.split(c)[1:] for c in base["commands"])
    assert train[0] == "train" and translate[0] == "translate" and score[0] == "score"
    model_dir = work / "exp/systems/base/seed1234"
    with chdir(work):
        assert main(train + ["--set", f"model_dir={tmp_path / 'again'}", "--quiet"]) == 0
        hyp = tmp_path / "again.hyp.en"
        translate[translate.index(str(Path("exp/systems/base/seed1234")))] = str(tmp_path / "again")
        translate[translate.index("-o") + 1] = str(hyp)
        assert main(translate) == 0
        assert hyp.read_text(encoding="utf-8") == (model_dir / "test.hyp.en").read_text(encoding="utf-8")
        capsys.readouterr()
        assert main(score + ["--json"]) == 0
        scores = json.loads(capsys.readouterr().out)["systems"][0]["scores"]
        assert scores["bleu"]["value"] == pytest.approx(base["mean"]["bleu"])
        assert scores["bleu_tok"]["value"] == pytest.approx(base["mean"]["bleu_tok"])
        significance = shlex.split(row(report(work), "dropper")["commands"][-1])[1:]
        assert main(significance + ["--json"]) == 0
        result = json.loads(capsys.readouterr().out)["significance"]["results"][0]
    assert result["p_value"] == pytest.approx(row(report(work), "dropper")["significance"]["max_p"])


def copy_experiment(finished, tmp_path) -> Path:
    work, path, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(work, copy)  # copy2 keeps modification times
    return copy


def test_resume_after_deleting_one_system_retrains_only_that_system(finished, tmp_path):
    work = copy_experiment(finished, tmp_path)
    base, mean = work / "exp/systems/base/seed1234", work / "exp/systems/mean/seed1234"
    before = {name: digest(base / name) for name in ("checkpoints/best.pt", "checkpoints/last.pt", "train.log",
                                                     "test.hyp.en")}
    shutil.rmtree(mean)
    log: list[str] = []
    with chdir(work):
        run_experiment(load_experiment(work / "tiny-experiment.yaml"), log=log.append, quiet=True)
    assert {name: digest(base / name) for name in before} == before
    assert "base seed 1234: already trained in exp/systems/base/seed1234" in log
    assert any(line.startswith("mean seed 1234: training") for line in log)
    assert json.loads((mean / "done.json").read_text())["update"] == UPDATES
    # the same seed and data give the same model, so the rebuilt report agrees with the first one
    assert row(report(work), "mean")["mean"]["bleu"] == pytest.approx(row(report(finished[0]), "mean")["mean"]["bleu"])


def test_interrupted_system_resumes_from_its_last_checkpoint(finished, tmp_path):
    work = copy_experiment(finished, tmp_path)
    mean = work / "exp/systems/mean/seed1234"
    (mean / "done.json").unlink()
    (mean / "decode.json").unlink()
    weights = torch.load(mean / "checkpoints/last.pt", weights_only=True)["model"]
    log: list[str] = []
    with chdir(work):
        run_experiment(load_experiment(work / "tiny-experiment.yaml"), log=log.append, quiet=True)
    assert "mean seed 1234: resuming from its last checkpoint in exp/systems/mean/seed1234" in log
    assert f"resumed from exp/systems/mean/seed1234/checkpoints/last.pt at update {UPDATES}" in (
        mean / "train.log").read_text()
    resumed = torch.load(mean / "checkpoints/last.pt", weights_only=True)["model"]
    assert all(torch.equal(weights[k], resumed[k]) for k in weights)  # the budget was already spent
    runs = {r["system"]: r["training"]["interruptions"]
            for r in json.loads((work / "exp/report.json").read_text())["runs"] if r.get("training")}
    assert runs == {"base": "none", "mean": f"resumed at {UPDATES:,}"}
    assert f"| resumed at {UPDATES:,} |" in (work / "exp/report.md").read_text(encoding="utf-8")


def test_changed_config_for_an_existing_directory_is_a_clear_error(finished, tmp_path, capsys):
    work = copy_experiment(finished, tmp_path)
    _, path, _ = finished
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw["overrides"] = ["training.valid_every=5"]
    (work / "tiny-experiment.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    before = digest(work / "exp/systems/base/seed1234/checkpoints/last.pt")
    with chdir(work):
        code = main(["experiment", "tiny-experiment.yaml", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "exp/systems/base/seed1234 was trained with a different config: training.valid_every is 10 there " \
           "but 5 in this experiment" in err
    assert digest(work / "exp/systems/base/seed1234/checkpoints/last.pt") == before


def test_a_misspelt_component_in_a_later_system_stops_the_experiment_before_any_training(
        tiny_config, tmp_path, capsys):
    """It had been found when that system's model was built, after the earlier systems trained."""
    external = tmp_path / "none.en"
    external.write_text("x\n", encoding="utf-8")
    path = write_experiment(tmp_path, tiny_config, external, systems=[
        {"name": "base", "config": str(tiny_config)},
        {"name": "mean", "config": str(tiny_config), "overrides": ["model.target_context=maen"]}])
    with chdir(tmp_path):
        code = main(["experiment", path.name, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == ("ctxnmt experiment: error: system 'mean': model.target_context: unknown "
                                         "target_context 'maen' (did you mean 'mean'?); known: "
                                         + ", ".join(sorted(TARGET_CONTEXTS.names())))
    assert not (tmp_path / "exp").exists()


def test_train_with_a_misspelt_component_makes_nothing(tiny_config, tmp_path, capsys):
    code = main(["train", str(tiny_config), "--quiet", "--set", f"model_dir={tmp_path / 'm'}",
                 "--set", "model.cell=gur"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().startswith("ctxnmt train: error: model.cell: unknown cell 'gur' (did you mean 'gru'?)")
    assert not (tmp_path / "m").exists()  # had held the prepared data, an empty checkpoints/ and train.log


def test_dry_run_lists_states_and_commands(finished, capsys):
    work, _, _ = finished
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "base seed 1234: done, exp/systems/base/seed1234" in out
    assert "--set training.max_updates=20 --set training.max_minutes=0" in out
    assert "dropper: external output" in out


def test_a_speed_only_setting_keeps_a_finished_run(finished, tmp_path, capsys):
    """Threads and logging change how fast a run goes, not what it learns: no retraining."""
    work = copy_experiment(finished, tmp_path)
    _, path, _ = finished
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw["overrides"] = [*raw.get("overrides", []), "training.threads=1", "training.log_every=3"]
    (work / "tiny-experiment.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    before = digest(work / "exp/systems/base/seed1234/checkpoints/last.pt")
    with chdir(work):
        code = main(["experiment", "tiny-experiment.yaml", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and "base seed 1234: done" in out
    assert digest(work / "exp/systems/base/seed1234/checkpoints/last.pt") == before


def copy_without(finished, tmp_path, system: str) -> Path:
    """A copy of the finished experiment with one system's runs and the report removed."""
    work = copy_experiment(finished, tmp_path)
    shutil.rmtree(work / f"exp/systems/{system}")
    (work / "exp/report.json").unlink()
    return work


def test_only_trains_the_named_runs_and_reports_the_finished_ones(finished, tmp_path):
    """Two processes can share an experiment: --only trains one run, the report covers what is done."""
    work = copy_without(finished, tmp_path, "mean")
    log: list[str] = []
    with chdir(work):
        run_experiment(load_experiment(work / "tiny-experiment.yaml"), log=log.append, quiet=True,
                       only=["base"])
    assert not (work / "exp/systems/mean").exists()
    assert "not finished yet, left out of the report: mean:1234" in log
    assert [r["system"] for r in report(work)["rows"]] == ["base", "dropper"]
    assert report(work)["not_reported"] == ["mean:1234 (not finished)"]  # the report itself says what it lacks
    assert "\nNot in this report: mean:1234 (not finished).\n" in (work / "exp/report.md").read_text()
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--quiet", "--only", "mean:1234"]) == 0
    assert [r["system"] for r in report(work)["rows"]] == ["base", "mean", "dropper"]
    assert report(work)["not_reported"] == [] and "Not in this report" not in (work / "exp/report.md").read_text()
    assert row(report(work), "mean")["mean"]["bleu"] == pytest.approx(row(report(finished[0]), "mean")["mean"]["bleu"])


def test_the_report_after_training_follows_an_experiment_edited_meanwhile(finished, tmp_path, monkeypatch):
    """A long --only run reads the experiment again before its report: a system whose runs were
    retrained under an edited file by another process meanwhile is reported, not refused."""
    import ctxnmt.experiments.runner as runner

    work = copy_without(finished, tmp_path, "mean")
    path = work / "tiny-experiment.yaml"
    train_all = runner.train_all

    def edited_while_training(*args, **kwargs):
        monkeypatch.setattr(runner, "train_all", train_all)  # the other process trains as usual
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        raw["systems"][1]["overrides"].append("training.lr=0.02")
        path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
        if not (work / "exp/systems/mean").exists():  # the other process, under the edited file
            assert main(["experiment", "tiny-experiment.yaml", "--quiet", "--only", "mean:1234"]) == 0
        train_all(*args, **kwargs)
        monkeypatch.setattr(runner, "train_all", edited_while_training)

    monkeypatch.setattr(runner, "train_all", edited_while_training)
    original = path.read_text(encoding="utf-8")
    with chdir(work):
        stale: list[str] = []
        run_experiment(load_experiment(path), log=stale.append, quiet=True, only=["base"])
        path.write_text(original, encoding="utf-8")
        shutil.rmtree(work / "exp/systems/mean")
        log: list[str] = []
        run_experiment(load_experiment(path), log=log.append, quiet=True, only=["base"],
                       reload=lambda: load_experiment(path))
    assert "the experiment changed while training: the report follows it as it is now" in log
    assert [r["system"] for r in report(work)["rows"]] == ["base", "mean", "dropper"]
    # without reading the file again, the other process's run disagrees with the stale plan: left out, not refused
    assert any(line.startswith("left out of the report: mean:1234: ") and "exp/systems/mean/seed1234 was trained "
               "with a different config: training.lr is 0.02 there" in line for line in stale)


def test_only_reports_beside_a_run_written_by_a_newer_checkout(finished, tmp_path, capsys):
    """Another process, on a newer checkout, wrote a config key this one does not know: an --only
    run still trains, decodes and reports, leaving that run out with the reason, in one line."""
    work = copy_without(finished, tmp_path, "base")
    saved = work / "exp/systems/mean/seed1234/config.yaml"
    raw = yaml.safe_load(saved.read_text(encoding="utf-8"))
    raw["model"]["from_a_newer_checkout"] = True
    saved.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--quiet", "--only", "base"]) == 0
        err = capsys.readouterr().err
        assert [r["system"] for r in report(work)["rows"]] == ["base", "dropper"]
        left_out = [line for line in err.splitlines() if "left out of the report: mean:1234" in line]
        assert len(left_out) == 1 and "config.yaml no longer loads" in left_out[0]
        assert "from_a_newer_checkout" in left_out[0]
        # the report itself names the run it lacks, and why, not only the command's log
        [named] = [item for item in report(work)["not_reported"] if item.startswith("mean:1234 (")]
        assert "config.yaml no longer loads" in named and "from_a_newer_checkout" in named
        assert "Not in this report: " in (work / "exp/report.md").read_text(encoding="utf-8")
        # the same mismatch in a run this process is asked to report is still an error
        assert main(["experiment", "tiny-experiment.yaml", "--quiet", "--report"]) == 2
        assert "config.yaml no longer loads" in capsys.readouterr().err


def test_report_with_an_external_baseline_and_no_finished_run_is_none_not_a_traceback(finished, tmp_path):
    work = copy_experiment(finished, tmp_path)
    shutil.rmtree(work / "exp/systems")
    raw = yaml.safe_load((work / "tiny-experiment.yaml").read_text(encoding="utf-8"))
    (work / "tiny-experiment.yaml").write_text(yaml.safe_dump({**raw, "baseline": "dropper"}), encoding="utf-8")
    log: list[str] = []
    with chdir(work):
        assert run_experiment(load_experiment(work / "tiny-experiment.yaml"), log=log.append, train=False) is None
    assert "no run has finished yet: no report" in log


def test_report_without_a_finished_baseline_trains_nothing_and_writes_nothing(finished, tmp_path):
    work = copy_without(finished, tmp_path, "base")
    log: list[str] = []
    with chdir(work):
        assert run_experiment(load_experiment(work / "tiny-experiment.yaml"), log=log.append, train=False) is None
    assert "the baseline has no finished run yet: no report" in log
    assert not (work / "exp/systems/base").exists() and not (work / "exp/report.json").exists()


def test_a_moved_experiment_directory_keeps_its_runs(finished, tmp_path, capsys):
    """Runs are found where they are: the model_dir saved in config.yaml says where they were trained."""
    work = copy_experiment(finished, tmp_path)
    raw = yaml.safe_load((work / "tiny-experiment.yaml").read_text(encoding="utf-8"))
    raw["out_dir"] = "moved"
    (work / "exp").rename(work / "moved")
    (work / "tiny-experiment.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--dry-run"]) == 0
    assert "base seed 1234: done, moved/systems/base/seed1234" in capsys.readouterr().out


def test_two_seeds_are_tested_together_over_the_seed_pairs(tiny_config, tiny_corpus, tmp_path):
    """With seeds 1 and 2 each system's row pools both seeds' outputs in Clark et al.'s stratified
    test, and its p-value is that of the test run directly on the same files."""
    from sacrebleu.metrics import BLEU

    from ctxnmt.data.corpus import read_lines
    from ctxnmt.evaluation.replicates import seed_t_test, stratified_ar

    external = tmp_path / "dropper.en"
    external.write_text("\n".join(drop_second_word(read_lines(tiny_corpus / "test.en"))) + "\n", encoding="utf-8")
    path = write_experiment(tmp_path, tiny_config, external, budget={"updates": 10, "seeds": [1, 2]},
                            significance={"samples": 200})
    with chdir(tmp_path):
        run_experiment(load_experiment(path), log=lambda message: None, quiet=True)
    data = report(tmp_path)
    mean = row(data, "mean")
    assert mean["seeds"] == [1, 2] and mean["cells"][1] == "2"
    hyps = {(name, seed): read_lines(tmp_path / f"exp/systems/{name}/seed{seed}/test.hyp.en", allow_empty=True)
            for name in ("base", "mean") for seed in (1, 2)}
    direct = stratified_ar([hyps["base", 1], hyps["base", 2]], [hyps["mean", 1], hyps["mean", 2]],
                           read_lines(tiny_corpus / "test.en"), "bleu", trials=200, seed=12345)
    assert mean["significance"]["over_seeds"]["p_value"] == direct.p_value
    assert mean["cells"][data["columns"].index("all seeds: Δ, p")] == f"{direct.delta:+.2f}, p={direct.p_value:.3f}"
    assert row(data, "dropper")["significance"].get("over_seeds") is None  # an external output has no seeds
    refs = read_lines(tiny_corpus / "test.en")
    per_seed = [BLEU().corpus_score(hyps["mean", s], [refs]).score - BLEU().corpus_score(hyps["base", s], [refs]).score
                for s in (1, 2)]  # the t-test over seeds: each seed pair's sacreBLEU difference is one observation
    expected = seed_t_test(per_seed)
    assert mean["significance"]["seeds_t"]["p_value"] == pytest.approx(expected["p_value"])
    assert mean["significance"]["seeds_t"]["mean"] == pytest.approx(statistics.fmean(per_seed))
    assert row(data, "dropper")["significance"].get("seeds_t") is None


def test_an_ensemble_system_decodes_its_members_together_seed_by_seed(finished, tmp_path):
    """The ensemble's output is `ctxnmt translate BASE MEAN` of the same seed's runs, scored and
    tested against the baseline like a trained system, with the command in the report."""
    from ctxnmt.decoding.translator import Translator

    work = copy_experiment(finished, tmp_path)
    raw = yaml.safe_load((work / "tiny-experiment.yaml").read_text(encoding="utf-8"))
    raw["systems"].append({"name": "base+mean", "ensemble": ["base", "mean"]})
    (work / "tiny-experiment.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    log: list[str] = []
    with chdir(work):
        run_experiment(load_experiment(work / "tiny-experiment.yaml"), log=log.append, quiet=True)
        src = Path(report(work)["test"]["src"]).read_text(encoding="utf-8").splitlines()
        ensemble = Translator.load(["exp/systems/base/seed1234", "exp/systems/mean/seed1234"])
        expected = [t.text for t in ensemble.translate(src)]
    hyp = work / "exp/ensembles/base+mean/seed1234/test.hyp.en"
    assert hyp.read_text(encoding="utf-8").splitlines() == expected
    ens = row(report(work), "base+mean")
    assert ens["seeds"] == [1234] and ens["significance"]["test"] == "ar"
    parameters = row(report(work), "base")["mean"]["parameters"] + row(report(work), "mean")["mean"]["parameters"]
    assert ens["mean"]["parameters"] == parameters
    assert any(c.startswith("ctxnmt translate exp/systems/base/seed1234 exp/systems/mean/seed1234 -i ")
               for c in ens["commands"])
    assert not any("already trained" not in line and "training in" in line for line in log)  # nothing retrained


def test_export_copies_the_small_results_and_never_a_checkpoint(finished, tmp_path, capsys):
    work = copy_experiment(finished, tmp_path)
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--export", "results"]) == 0
    out = work / "results"
    copied = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert "report.md" in copied and "report.json" in copied and "systems/base/seed1234/test.hyp.en" in copied
    assert "systems/mean/seed1234/train.log" in copied and "systems/mean/seed1234/config.yaml" in copied
    assert any(name.startswith("significance/") for name in copied)
    assert not any(name.endswith(".pt") or "/prep/" in name or "tensorboard" in name for name in copied)
    assert (out / "systems/base/seed1234/test.hyp.en").read_bytes() == \
        (work / "exp/systems/base/seed1234/test.hyp.en").read_bytes()
    assert f"exported {len(copied)} files to results" in capsys.readouterr().out
    (work / "exp/systems/mean/seed1234/done.json").unlink()  # as if still training
    shutil.copytree(work / "exp/systems/base/seed1234", work / "exp/systems/dropped/seed1234")  # a system since removed
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--export", "again"]) == 0
    assert not (work / "again/systems/mean").exists() and (work / "again/systems/base/seed1234/test.hyp.en").exists()
    assert not (work / "again/systems/dropped").exists()  # finished, but not one of the report's runs


def test_export_replaces_what_an_earlier_export_left_and_names_runs_the_report_lacks(finished, tmp_path, capsys):
    """An export mirrors its report: files an earlier export left in a run directory or among
    the significance tests (a seed set since grown) go; a run directory the report does not
    list stays, named, since the report may lack it only because this machine does."""
    work = copy_experiment(finished, tmp_path)
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--export", "results"]) == 0
    listed = report(work)["files"]
    assert listed["runs"] == ["systems/base/seed1234", "systems/mean/seed1234"]
    assert listed["external"] == ["external/dropper.scores.json"]
    assert listed["significance"] and all(name.startswith("significance/") for name in listed["significance"])
    out = work / "results"
    (out / "systems/base/seed1234/test.hyp.old").write_text("an earlier decoding\n", encoding="utf-8")
    (out / "significance/mean-seeds1-2-vs-base.json").write_text("{}\n", encoding="utf-8")
    shutil.copytree(out / "systems/base/seed1234", out / "systems/removed/seed1")
    capsys.readouterr()
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--export", "results"]) == 0
    assert not (out / "systems/base/seed1234/test.hyp.old").exists()
    assert sorted(p.name for p in (out / "significance").iterdir()) == \
        sorted(Path(name).name for name in listed["significance"])
    assert (out / "systems/removed/seed1/test.hyp.en").exists()
    assert "left in results, not in this report: systems/removed/seed1 (delete them" in capsys.readouterr().out
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["files"] == listed
    shutil.rmtree(work / "exp")  # a new machine: --restore brings back the report's runs, not the stray one
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--restore", "results"]) == 0
    assert "restored 2 runs from results" in capsys.readouterr().out
    assert not (work / "exp/systems/removed").exists()


def test_export_into_the_experiment_directory_itself_copies_nothing_and_keeps_the_checkpoints(
        finished, tmp_path, capsys):
    work = copy_experiment(finished, tmp_path)
    checkpoints = sorted(p.relative_to(work) for p in (work / "exp").rglob("*.pt"))
    assert checkpoints
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--export", "exp"]) == 0
    assert "exp is the experiment directory: nothing to copy" in capsys.readouterr().out
    assert sorted(p.relative_to(work) for p in (work / "exp").rglob("*.pt")) == checkpoints


def test_export_over_another_experiment_s_training_is_refused_and_deletes_nothing(finished, tmp_path, capsys):
    """The same system and seed names in another experiment's directory: swapping its run
    directories in whole would delete their checkpoints."""
    work = copy_experiment(finished, tmp_path)
    shutil.copytree(work / "exp", work / "other")
    before = sorted(p.relative_to(work) for p in (work / "other").rglob("*") if p.is_file())
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--export", "other"]) != 0
    err = capsys.readouterr().err
    assert "other/systems/base/seed1234: holds checkpoints/, a training's directory, not an export" in err
    assert sorted(p.relative_to(work) for p in (work / "other").rglob("*") if p.is_file()) == before


def test_export_of_a_report_that_lists_no_files_is_a_clear_error(finished, tmp_path, capsys):
    from ctxnmt.experiments.export import export_results

    work = copy_experiment(finished, tmp_path)
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report"]) == 0
    written = json.loads((work / "exp/report.json").read_text(encoding="utf-8"))
    del written["files"]  # as written before reports listed them
    (work / "exp/report.json").write_text(json.dumps(written), encoding="utf-8")
    with pytest.raises(DataError, match=r"report.json: lists no files .* write it again with --report"):
        export_results(work / "exp", work / "results")
    assert not (work / "results").exists()


def exported_with_ensemble(finished, tmp_path) -> tuple[Path, Path]:
    """(a finished copy with a base+mean ensemble, its --export in results/)."""
    work = copy_experiment(finished, tmp_path)
    raw = yaml.safe_load((work / "tiny-experiment.yaml").read_text(encoding="utf-8"))
    raw["systems"].append({"name": "base+mean", "ensemble": ["base", "mean"]})
    (work / "tiny-experiment.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--export", "results"]) == 0
    return work, work / "results"


def test_restore_reports_the_exported_runs_without_their_checkpoints(finished, tmp_path, capsys):
    """A new machine: the experiment directory is gone, only the committed export is left.
    --restore puts the runs back, and the report has the same rows, numbers and tests."""
    work, results = exported_with_ensemble(finished, tmp_path)
    before = report(work)
    shutil.rmtree(work / "exp")
    log: list[str] = []
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--restore", "results"]) == 0
        assert "restored 3 runs from results" in capsys.readouterr().out
        assert not list((work / "exp").rglob("*.pt"))
        run_experiment(load_experiment(work / "tiny-experiment.yaml"), log=log.append, train=False)
    after = report(work)
    assert [r["system"] for r in after["rows"]] == ["base", "mean", "dropper", "base+mean"]
    for old, new in zip(before["rows"], after["rows"]):
        assert new["cells"] == old["cells"], new["system"]
    assert "base seed 1234: restored test translation (no checkpoint)" in log
    assert "base+mean seed 1234: restored test translation (no checkpoint)" in log


def test_an_ensemble_whose_members_kept_no_checkpoint_is_left_out_not_an_error(finished, tmp_path):
    """An ensemble added after its members were exported (or whose own output was never
    exported) cannot be decoded on a new machine: the report goes on without it and says why."""
    work, results = exported_with_ensemble(finished, tmp_path)
    shutil.rmtree(work / "exp")
    shutil.rmtree(results / "ensembles")
    log: list[str] = []
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--restore", "results"]) == 0
        run_experiment(load_experiment(work / "tiny-experiment.yaml"), log=log.append, train=False)
    assert [r["system"] for r in report(work)["rows"]] == ["base", "mean", "dropper"]
    reason = "base seed 1234, mean seed 1234 kept no checkpoint (restored from an export); retrain to decode this ensemble"
    assert f"base+mean seed 1234: left out: {reason}" in log
    assert report(work)["not_reported"] == [f"base+mean:1234 ({reason})"]
    assert f"Not in this report: base+mean:1234 ({reason})." in (work / "exp/report.md").read_text()
    assert not (work / "exp/ensembles/base+mean/seed1234").exists()


def test_an_ensemble_baseline_that_cannot_be_decoded_is_no_report_not_a_traceback(finished, tmp_path, capsys):
    """The same undecodable ensemble as the baseline: nothing to compare against, so no report."""
    work, results = exported_with_ensemble(finished, tmp_path)
    shutil.rmtree(work / "exp")
    shutil.rmtree(results / "ensembles")
    raw = yaml.safe_load((work / "tiny-experiment.yaml").read_text(encoding="utf-8"))
    (work / "tiny-experiment.yaml").write_text(yaml.safe_dump({**raw, "baseline": "base+mean"}), encoding="utf-8")
    log: list[str] = []
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--restore", "results"]) == 0
        assert run_experiment(load_experiment(work / "tiny-experiment.yaml"), log=log.append, train=False) is None
    assert "the baseline has no output yet: no report" in log
    assert not (work / "exp/report.json").exists()


def test_restore_never_replaces_a_local_run(finished, tmp_path):
    work, results = exported_with_ensemble(finished, tmp_path)
    (results / "systems/base/seed1234/train.log").write_text("exported\n", encoding="utf-8")
    local = (work / "exp/systems/base/seed1234/train.log").read_bytes()
    shutil.rmtree(work / "exp/systems/mean")
    from ctxnmt.experiments.export import restore_results

    restored = restore_results(results, work / "exp")
    assert restored == [work / "exp/systems/mean/seed1234"]
    assert (work / "exp/systems/base/seed1234/train.log").read_bytes() == local


def test_a_restored_run_whose_output_was_changed_is_a_clear_error(finished, tmp_path, capsys):
    work, results = exported_with_ensemble(finished, tmp_path)
    shutil.rmtree(work / "exp")
    with (results / "systems/mean/seed1234/test.hyp.en").open("a", encoding="utf-8") as fh:
        fh.write("edited\n")
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--restore", "results"]) != 0
    err = capsys.readouterr().err
    assert "mean seed 1234:" in err and "test.hyp.en is missing or differs from the translation" in err
    assert "no checkpoint to translate again" in err


def test_restore_from_a_directory_that_is_no_export_is_a_clear_error(finished, tmp_path, capsys):
    work = copy_experiment(finished, tmp_path)
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--restore", "nowhere"]) != 0
    assert "nowhere: not an exported experiment (no report.json there)" in capsys.readouterr().err


def test_two_jobs_train_the_runs_side_by_side_into_the_same_models(finished, tmp_path, capsys):
    """--jobs 2 trains both systems at once, each in its own process, and gets the very
    weights and report that training them one after the other gave."""
    work = copy_experiment(finished, tmp_path)
    for system in ("base", "mean"):
        shutil.rmtree(work / f"exp/systems/{system}")
    (work / "exp/report.json").unlink()
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--quiet", "--jobs", "2"]) == 0
    err = capsys.readouterr().err
    assert "base seed 1234: finished" in err and "mean seed 1234: finished" in err
    for system in ("base", "mean"):
        a, b = (torch.load(root / f"exp/systems/{system}/seed1234/checkpoints/last.pt", weights_only=True)["model"]
                for root in (finished[0], work))
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert [row(report(work), s)["mean"]["bleu"] for s in ("base", "mean")] == \
        [row(report(finished[0]), s)["mean"]["bleu"] for s in ("base", "mean")]
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--jobs", "0"]) == 2
    assert "--jobs must be at least 1, not 0" in capsys.readouterr().err


def test_a_run_planned_fresh_but_finished_meanwhile_is_not_trained_again(finished, tmp_path):
    """`ctxnmt experiment` plans every run's state at its start; hours later another process
    (an --only beside it) may have finished one.  Training reads the state again first."""
    from ctxnmt.experiments.runs import plan_runs, train

    work = copy_experiment(finished, tmp_path)
    with chdir(work):
        run = plan_runs(load_experiment(work / "tiny-experiment.yaml"))[0]
        before = {p: p.read_bytes() for p in run.model_dir.rglob("*") if p.is_file()}
        train(run, quiet=True)  # planned FRESH, before the other process finished it
        assert {p: p.read_bytes() for p in run.model_dir.rglob("*") if p.is_file()} == before


def test_broken_json_in_an_export_is_one_line_and_a_broken_cache_is_computed_again(finished, tmp_path, capsys):
    work, results = exported_with_ensemble(finished, tmp_path)
    cache = next((work / "exp/significance").glob("mean-seed*.json"))
    cache.write_text("{\"key\": ", encoding="utf-8")  # a cache cut short: computed again, not an error
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report"]) == 0
    assert json.loads(cache.read_text(encoding="utf-8"))["value"]["p_value"] is not None
    (results / "report.json").write_text("<<<<<<< HEAD\n{}\n", encoding="utf-8")  # a merge conflict
    shutil.rmtree(work / "exp")
    capsys.readouterr()
    with chdir(work):
        assert main(["experiment", "tiny-experiment.yaml", "--report", "--restore", "results"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("results/report.json: not valid JSON (Expecting value at line 1 column 1)")
    assert len(err.splitlines()) == 1


def test_one_preparation_is_shared_only_where_every_system_of_the_experiment_has_the_same_data(
        finished, tmp_path, monkeypatch):
    """An --only process that trains one system must not judge by its own runs alone: another
    process may train a system of another data section into the same experiment."""
    from ctxnmt.experiments import runner
    from ctxnmt.experiments.runs import plan_runs, select_runs

    work = copy_without(finished, tmp_path, "mean")
    raw = yaml.safe_load((work / "tiny-experiment.yaml").read_text(encoding="utf-8"))
    raw["systems"][0]["overrides"] = ["data.max_len=60"]  # base: another data section than mean's
    (work / "tiny-experiment.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    shared: list[str] = []
    monkeypatch.setattr(runner, "prepare_shared", lambda experiment, todo, log: shared.append("prepared"))
    monkeypatch.setattr(runner, "train", lambda *args: None)
    with chdir(work):
        experiment = load_experiment(work / "tiny-experiment.yaml")
        mine = select_runs(plan_runs(experiment), ["mean"])
        runner.train_all(experiment, plan_runs(experiment), mine, runner.check_runs(mine), log=lambda line: None,
                         quiet=True)
    assert shared == []


def test_an_external_output_per_seed_is_paired_seed_by_seed(tiny_config, tiny_corpus, tmp_path):
    """`output: …{seed}…` gives an external system one output per seed (a baseline trained in
    another experiment, say): each trained seed is tested against the same seed's output, and
    the seeds together in the stratified test, as two trained systems would be."""
    from ctxnmt.data.corpus import read_lines
    from ctxnmt.evaluation.replicates import stratified_ar

    refs = read_lines(tiny_corpus / "test.en")
    outputs = {1: drop_second_word(refs), 2: [" ".join(line.split()[:-1]) for line in refs]}
    for seed, lines in outputs.items():
        (tmp_path / f"earlier-seed{seed}.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = write_experiment(tmp_path, tiny_config, tmp_path / "unused.en", baseline="earlier",
                            budget={"updates": 10, "seeds": [1, 2]}, significance={"samples": 200},
                            systems=[{"name": "earlier", "output": str(tmp_path / "earlier-seed{seed}.en")},
                                     {"name": "base", "config": str(tiny_config)}])
    with chdir(tmp_path):
        run_experiment(load_experiment(path), log=lambda message: None, quiet=True)
    data = report(tmp_path)
    assert row(data, "earlier")["seeds"] == [1, 2] and row(data, "earlier")["external"]
    base = row(data, "base")["significance"]
    hyps = [read_lines(tmp_path / f"exp/systems/base/seed{seed}/test.hyp.en", allow_empty=True) for seed in (1, 2)]
    direct = stratified_ar(list(outputs.values()), hyps, refs, "bleu", trials=200, seed=12345)
    assert base["over_seeds"]["p_value"] == direct.p_value
    assert sorted(p.name for p in (tmp_path / "exp" / "external").iterdir()) == [
        "earlier-seed1.scores.json", "earlier-seed2.scores.json"]
    assert sorted(p.name for p in (tmp_path / "exp" / "significance").iterdir())[:2] == [
        "base-seed1-vs-earlier-seed1.json", "base-seed2-vs-earlier-seed2.json"]
