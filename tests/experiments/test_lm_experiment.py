"""Language models compared over seeds by an experiment file (`task: language-model`): each
system and seed trained once, the report's perplexities, per-seed deltas and tests against
each run's own records, resuming, --only/--report/--export/--restore, and one-line errors
for what such an experiment refuses."""
from __future__ import annotations

import json
import math
import shlex
import shutil
import statistics
from pathlib import Path

import pytest
import torch
import yaml

from ctxnmt.cli import main
from ctxnmt.utils.revision import source_revision

TEXT = ["the cat sat on the mat .", "the dog sat on the log .", "a bird flew over the house ."]


@pytest.fixture(scope="module")
def lm_corpus(tmp_path_factory) -> Path:
    """Three sentences repeated: 90 training lines, and six dev and test lines of 8 tokens each."""
    root = tmp_path_factory.mktemp("lmtext")
    for split, repeat in (("train", 30), ("dev", 2), ("test", 2)):
        (root / f"{split}.en").write_text("\n".join(TEXT * repeat) + "\n", encoding="utf-8")
    return root


def run(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def lm_configs(directory: Path, corpus: Path, *summaries: str, model: str = "", training: str = "") -> list[Path]:
    """One tiny LM config per summary, named lm-{summary}; the experiment's budget sets their updates."""
    paths = []
    for summary in summaries:
        path = directory / f"lm-{summary}.yaml"
        path.write_text(f"name: lm-{summary}\ndata: {{dir: {corpus}}}\n"
                        f"model: {{summary: {summary}, emb_dim: 8, hidden_dim: 12{model}}}\n"
                        f"training: {{batch_size: 4, bptt: 10, valid_every: 10, threads: 1{training}}}\n")
        paths.append(path)
    return paths


def write_experiment(path: Path, configs: list[Path], out: Path, seeds=(1,), updates: int = 10,
                     names: list[str] | None = None, **changes) -> Path:
    """An LM experiment file at `path`: a system per config (named after it, or `names`), the
    first the baseline, trained `updates` updates with each of `seeds` into `out`."""
    names = names or [config.stem for config in configs]
    raw = {"name": "lm-cmp", "task": "language-model", "out_dir": str(out), "baseline": names[0],
           "budget": {"updates": updates, "seeds": list(seeds)},
           "systems": [{"name": name, "config": str(config)} for name, config in zip(names, configs)]}
    raw.update(changes)
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def ppl(out: Path, name: str, seed: int) -> float:
    return json.loads((out / "systems" / name / f"seed{seed}" / "results.json").read_text())["test_ppl"]


def test_an_lm_experiment_trains_each_system_and_seed_once_and_reports_mean_and_per_seed_deltas(
        lm_corpus, tmp_path, capsys):
    configs = lm_configs(tmp_path, lm_corpus, "previous", "mean", model=", dropout: 0.0", training=", lr: 0.01")
    out = tmp_path / "cmp"
    experiment = write_experiment(tmp_path / "lm.yaml", configs, out, seeds=(1, 2), updates=20)
    code, stdout, _ = run(["experiment", experiment, "--quiet"], capsys)
    assert code == 0 and "| lm-previous | " in stdout and "| lm-mean | " in stdout
    report = json.loads((out / "report.json").read_text())
    assert set(report) == {"experiment", "seeds", "waiting", "left_out", "rows", "files"}
    assert report["seeds"] == [1, 2] and report["waiting"] == [] and report["left_out"] == []
    assert report["files"]["runs"] == [f"systems/{name}/seed{seed}" for name in ("lm-previous", "lm-mean")
                                       for seed in (1, 2)]
    runs = {(name, seed): ppl(out, name, seed) for name in ("lm-previous", "lm-mean") for seed in (1, 2)}
    base, mean = report["rows"]
    assert base["test_ppl"] == [runs["lm-previous", 1], runs["lm-previous", 2]]
    assert mean["delta"] == pytest.approx([runs["lm-mean", s] - runs["lm-previous", s] for s in (1, 2)])
    assert mean["mean"] == pytest.approx((runs["lm-mean", 1] + runs["lm-mean", 2]) / 2)
    assert runs["lm-previous", 1] != runs["lm-previous", 2]  # the seed reaches the model
    for name, seed in runs:  # the per-line scores the tests read are the run's test perplexity
        lines = (out / "systems" / name / f"seed{seed}" / "test.logprobs").read_text().splitlines()
        logprob, tokens = (sum(float(line.split("\t")[i]) for line in lines) for i in (0, 1))
        assert len(lines) == 6 and math.exp(-logprob / tokens) == pytest.approx(runs[name, seed], rel=1e-3)
    assert mean["paired_seeds"] == [1, 2] and list(mean["p_per_seed"]) == ["1", "2"]
    assert all(0 < p <= 1 for p in [*mean["p_per_seed"].values(), mean["p_over_seeds"]])
    assert "| p over seeds (stratified AR) | p over seeds (t-test on Δ) |" in stdout
    assert "Not finished yet" not in stdout
    delta = [runs["lm-mean", s] - runs["lm-previous", s] for s in (1, 2)]  # two seeds: t with 1 degree of freedom
    if delta[0] != delta[1]:
        t = statistics.fmean(delta) / (statistics.stdev(delta) / math.sqrt(2))
        assert mean["t_over_seeds"]["p_value"] == pytest.approx(1 - 2 / math.pi * math.atan(abs(t)), rel=1e-3)
        # the smallest mean Δ that test calls significant: t(0.975, 1) = tan(0.475 π) = 12.706…, times sd / √2
        detectable = math.tan(0.475 * math.pi) * statistics.stdev(delta) / math.sqrt(2)
        assert mean["t_over_seeds"]["detectable"] == pytest.approx(detectable, rel=1e-6)
        assert f"| {detectable:.2f} | " in stdout
    results = [json.loads((out / "systems/lm-mean" / f"seed{seed}" / "results.json").read_text()) for seed in (1, 2)]
    assert mean["dev_ppl"] == [r["dev_ppl"] for r in results] and mean["updates"] == [20, 20]  # the budget's
    dev = statistics.fmean(mean["dev_ppl"]), statistics.stdev(mean["dev_ppl"])
    minutes = statistics.fmean(r["minutes"] for r in results)
    source = source_revision()  # the commit each run was trained from
    assert f"| yes | {dev[0]:.2f} ± {dev[1]:.2f} | 20 | {minutes:.1f} | none | {source[:12]} |" in stdout or \
        f"| no | {dev[0]:.2f} ± {dev[1]:.2f} | 20 | {minutes:.1f} | none | {source[:12]} |" in stdout
    assert mean["interruptions"] == ["none", "none"]  # each run started once
    assert mean["source"] == [source, source] and all(r["source"] == source for r in results)
    # the report ends with each run's own training command, the budget and seed as --set items
    [command] = [line for line in stdout.splitlines() if line.startswith("ctxnmt lm train ") and "seed=1 " in line
                 and "lm-mean/seed1" in line]
    assert command == (f"ctxnmt lm train {configs[1]} --set training.max_updates=20 --set training.max_minutes=0 "
                       f"--set training.max_epochs=0 --set training.seed=1 --set "
                       f"model_dir={out}/systems/lm-mean/seed1")
    assert str(experiment) not in stdout  # the report does not name the experiment file
    again = tmp_path / "again"  # that command alone trains the same model
    assert run([*shlex.split(command)[1:], "--quiet", "--set", f"model_dir={again}"], capsys)[0] == 0
    assert json.loads((again / "results.json").read_text())["test_ppl"] == pytest.approx(runs["lm-mean", 1])
    # a second call trains nothing; a run whose training finished (done.json) but not its
    # scoring is only scored; an unfinished one goes on from its last checkpoint, and one
    # without a checkpoint is trained again from the start, in its directory
    for name, seed, files in (("lm-previous", 2, ["results.json"]), ("lm-mean", 2, ["results.json", "done.json"]),
                              ("lm-mean", 1, ["results.json", "done.json", "checkpoints/last.pt"])):
        for file in files:
            (out / "systems" / name / f"seed{seed}" / file).unlink()
    before = {seed: (out / "systems/lm-previous" / f"seed{seed}" / "checkpoints" / "last.pt").stat().st_mtime_ns
              for seed in (1, 2)}
    code, _, err = run(["experiment", experiment, "--quiet"], capsys)
    assert code == 0, err
    assert f"experiment: lm-previous seed 1: already trained in {out}/systems/lm-previous/seed1" in err
    assert f"experiment: lm-previous seed 2: scoring its finished training in {out}/systems/lm-previous/seed2" in err
    assert f"experiment: lm-mean seed 2: resuming from its last checkpoint in {out}/systems/lm-mean/seed2" in err
    assert f"experiment: lm-mean seed 1: training in {out}/systems/lm-mean/seed1" in err
    assert ppl(out, "lm-mean", 1) == pytest.approx(runs["lm-mean", 1])
    assert {seed: (out / "systems/lm-previous" / f"seed{seed}" / "checkpoints" / "last.pt").stat().st_mtime_ns
            for seed in (1, 2)} == before  # neither trained again
    assert ppl(out, "lm-previous", 2) == pytest.approx(runs["lm-previous", 2])
    assert ppl(out, "lm-mean", 2) == pytest.approx(runs["lm-mean", 2])  # the same seed retrained gives the same model
    # the report names what each run's log shows: seed 1 started over (its log kept), seed 2 resumed at its end
    rows = json.loads((out / "report.json").read_text())["rows"]
    assert rows[1]["interruptions"] == ["restarted from update 0 1×", "resumed at 20"]
    assert rows[0]["interruptions"] == ["none", "none"]
    changed = write_experiment(tmp_path / "lr.yaml", configs, out, seeds=(1, 2), updates=20,
                               overrides=["training.lr=0.02"])
    code, _, err = run(["experiment", changed, "--quiet"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{out}/systems/lm-previous/seed1 was trained with a different config: training.lr is 0.01 there but " \
           "0.02 in this experiment; use another out_dir or delete that directory" in err


def test_a_signalled_lm_experiment_resumes_its_run_when_run_again(lm_corpus, tmp_path, capsys, monkeypatch):
    import os
    import signal

    from ctxnmt.training.trainer import Trainer

    out = tmp_path / "out"
    experiment = write_experiment(tmp_path / "lm.yaml", lm_configs(tmp_path, lm_corpus, "mean"), out, updates=20)
    update = Trainer.train_on

    def update_then_signal(trainer, *a):
        if trainer.progress.update == 4:
            os.kill(os.getpid(), signal.SIGINT)
        return update(trainer, *a)

    monkeypatch.setattr(Trainer, "train_on", update_then_signal)
    code, _, err = run(["experiment", experiment], capsys)
    last = out / "systems" / "lm-mean" / "seed1" / "checkpoints" / "last.pt"
    assert code == 130
    assert err.strip().splitlines()[-1] == (f"ctxnmt experiment: stopped by SIGINT at update 5; saved {last}; "
                                            "the same command resumes")
    assert not (out / "report.json").exists()
    monkeypatch.setattr(Trainer, "train_on", update)
    code, stdout, err = run(["experiment", experiment], capsys)
    assert code == 0 and "experiment: lm-mean seed 1: resuming from its last checkpoint" in err
    assert json.loads((out / "systems" / "lm-mean" / "seed1" / "results.json").read_text())["updates"] == 20
    [row] = json.loads((out / "report.json").read_text())["rows"]
    assert row["interruptions"] == ["resumed at 5"]  # the report names the resume its log shows
    assert stdout.splitlines()[4].endswith(f"| 1: resumed at 5 | {source_revision()[:12]} |")


def test_an_lm_experiment_keeps_an_out_directory_that_yaml_would_misread(lm_corpus, tmp_path, capsys):
    """Each run's model_dir reaches its config as a --set value, parsed as YAML: ' #' would
    begin a comment, and every seed would share the directory before it."""
    out = tmp_path / "cmp #2"
    experiment = write_experiment(tmp_path / "lm.yaml", lm_configs(tmp_path, lm_corpus, "previous"), out,
                                  seeds=(1, 2), updates=4)
    code, stdout, err = run(["experiment", experiment, "--quiet"], capsys)
    assert code == 0, err
    assert all((out / f"systems/lm-previous/seed{seed}/results.json").is_file() for seed in (1, 2))
    assert not (tmp_path / "cmp").exists()
    assert "| lm-previous | 1, 2 | " in stdout


def test_an_lm_experiment_refuses_systems_of_other_vocabularies_before_training(lm_corpus, tmp_path, capsys):
    previous, mean = lm_configs(tmp_path, lm_corpus, "previous", "mean")
    mean.write_text(mean.read_text().replace(f"data: {{dir: {lm_corpus}}}",
                                             f"data: {{dir: {lm_corpus}, vocab_size: 5}}"))
    out = tmp_path / "cmp"
    experiment = write_experiment(tmp_path / "lm.yaml", [previous, mean], out, updates=4)
    for extra in ([], ["--dry-run"]):
        code, _, err = run(["experiment", experiment, "--quiet", *extra], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "system 'lm-mean': its data section differs from 'lm-previous''s (data.vocab_size is 10000 there " \
               "but 5); perplexities over other texts or vocabularies do not compare" in err
        assert not out.exists()  # nothing trained


def test_only_trains_the_named_runs_and_the_report_waits_for_the_rest(lm_corpus, tmp_path, capsys):
    out = tmp_path / "cmp"
    experiment = write_experiment(tmp_path / "lm.yaml", lm_configs(tmp_path, lm_corpus, "previous"), out,
                                  seeds=(1, 2))
    code, stdout, err = run(["experiment", experiment, "--quiet", "--only", "lm-previous:2"], capsys)
    assert code == 0 and (out / "systems/lm-previous/seed2/results.json").is_file()
    assert not (out / "systems/lm-previous/seed1").exists()
    assert "experiment: not finished yet, left out of the report: lm-previous:1" in err
    assert "Not finished yet: lm-previous:1." in stdout and "| lm-previous | 2 | " in stdout
    code, stdout, _ = run(["experiment", experiment, "--report", "--export", tmp_path / "export"], capsys)
    assert code == 0 and "Not finished yet: lm-previous:1." in stdout and "| lm-previous | 2 | " in stdout
    # the unfinished seed has nothing to export
    assert sorted(p.name for p in (tmp_path / "export/systems/lm-previous").iterdir()) == ["seed2"]
    assert json.loads((tmp_path / "export/report.json").read_text())["waiting"] == ["lm-previous:1"]
    saved = out / "systems/lm-previous/seed2/config.yaml"
    finished_config = saved.read_text(encoding="utf-8")
    saved.write_text(finished_config + "from_a_newer_checkout: 1\n", encoding="utf-8")
    code, stdout, err = run(["experiment", experiment, "--quiet", "--only", "lm-previous:1"],
                            capsys)  # seed 2 belongs to another process, on a checkout with a key this one lacks
    assert code == 0 and "| lm-previous | 1 | " in stdout
    [left_out] = [line for line in err.splitlines() if "left out of the report: lm-previous:2: " in line]
    assert "from_a_newer_checkout" in left_out
    [named] = json.loads((out / "report.json").read_text(encoding="utf-8"))["left_out"]
    assert named.startswith("lm-previous:2 (") and "from_a_newer_checkout" in named
    assert "Left out: lm-previous:2 (" in stdout
    saved.write_text(finished_config, encoding="utf-8")
    code, stdout, err = run(["experiment", experiment, "--quiet", "--only", "lm-previous:1"], capsys)
    assert code == 0 and "| lm-previous | 1, 2 | " in stdout and "Not finished" not in stdout
    assert "experiment: lm-previous seed 1: already trained" in err
    code, stdout, _ = run(["experiment", experiment, "--report", "--export", out], capsys)
    assert code == 0 and f"{out} is the experiment directory: nothing to copy" in stdout
    assert (out / "systems/lm-previous/seed1/checkpoints/last.pt").is_file()
    code, _, err = run(["experiment", experiment, "--quiet", "--only", "lm-mean"], capsys)
    assert code == 2 and "--only 'lm-mean' names no run of this experiment" in err
    assert len(err.strip().splitlines()) == 1


def test_an_exported_lm_experiment_restored_elsewhere_reports_the_same_rows_and_trains_nothing(
        lm_corpus, tmp_path, capsys):
    """The committed results: --export copies each run's config.yaml, done.json, results.json,
    test.logprobs and train.log (no checkpoint) and the report; a second experiment directory
    restored from them with --restore gives the same report with --report; runs missing
    there are reported as such."""
    [path] = lm_configs(tmp_path, lm_corpus, "previous")
    out, copy = tmp_path / "cmp", tmp_path / "committed"
    experiment = write_experiment(tmp_path / "lm.yaml", [path], out, seeds=(1, 2))
    code, stdout, _ = run(["experiment", experiment, "--quiet", "--export", copy], capsys)
    assert code == 0 and f"exported 12 files to {copy}" in stdout
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file()) == sorted(
        ["report.json", "report.md"] + [f"systems/lm-previous/seed{seed}/{name}" for seed in (1, 2)
                                        for name in ("config.yaml", "done.json", "results.json", "test.logprobs",
                                                     "train.log")])
    assert (copy / "report.md").read_text() == (out / "report.md").read_text()
    (copy / "systems/lm-previous/seed1/stale.txt").write_text("an earlier export's")  # a re-export replaces runs whole
    assert run(["experiment", experiment, "--report", "--export", copy], capsys)[0] == 0
    assert not (copy / "systems/lm-previous/seed1/stale.txt").exists()
    assert (copy / "systems/lm-previous/seed1/results.json").is_file()

    def restored(name: str, runs: int) -> tuple[Path, str]:
        """A new experiment directory `name` restored from the export and reported: its directory and stdout."""
        elsewhere = tmp_path / name
        other = write_experiment(tmp_path / f"{name}.yaml", [path], elsewhere, seeds=(1, 2))
        code, stdout, err = run(["experiment", other, "--report", "--restore", copy], capsys)
        assert code == 0, err
        assert f"restored {runs} runs from {copy}" in stdout
        assert not any(elsewhere.rglob("*.pt"))  # nothing trained
        return elsewhere, stdout

    elsewhere, stdout = restored("elsewhere", 2)
    reports = [json.loads((directory / "report.json").read_text()) for directory in (out, elsewhere)]
    assert reports[1]["rows"] == reports[0]["rows"]
    assert {key: reports[1][key] for key in ("seeds", "waiting", "left_out", "files")} == \
        {key: reports[0][key] for key in ("seeds", "waiting", "left_out", "files")}
    assert reports[1]["experiment"]["out_dir"] == str(elsewhere)
    assert (elsewhere / "report.md").read_text() == (out / "report.md").read_text().replace(str(out), str(elsewhere))
    code, stdout, _ = run(["experiment", write_experiment(tmp_path / "elsewhere.yaml", [path], elsewhere, seeds=(1, 2)),
                           "--report", "--restore", copy], capsys)  # a run already there is not restored again
    assert code == 0 and f"restored 0 runs from {copy}" in stdout
    (copy / "systems/lm-previous/seed1/train.log").unlink()  # a run exported without its log
    no_log, _ = restored("no-log", 2)
    assert json.loads((no_log / "report.json").read_text())["rows"][0]["interruptions"] == ["not recorded", "none"]
    results = copy / "systems/lm-previous/seed1/results.json"  # a run trained before the commit was kept
    results.write_text(json.dumps({k: v for k, v in json.loads(results.read_text()).items() if k != "source"}))
    _, stdout = restored("no-source", 2)
    assert f"| 1: not recorded, 2: {source_revision()[:12]} |" in stdout
    shutil.rmtree(copy / "systems/lm-previous/seed2")
    partial, stdout = restored("partial", 1)
    assert "Not finished yet: lm-previous:2." in stdout and not (partial / "systems/lm-previous/seed2").exists()
    other = tmp_path / "elsewhere.yaml"  # both runs restored: the error is all stderr says
    for text, message in (("-3.5\tten\n", "not one 'log-probability<TAB>tokens' pair per line"),
                          ("", "empty; a finished run scores every test line")):
        (elsewhere / "systems/lm-previous/seed1/test.logprobs").write_text(text)
        code, _, err = run(["experiment", other, "--report"], capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    code, _, err = run(["experiment", other, "--report", "--only", "lm-previous:1"], capsys)
    assert code == 2 and "--only trains runs and --report trains none" in err


def test_the_report_tests_only_the_seeds_whose_runs_kept_per_line_scores(lm_corpus, tmp_path, capsys):
    """A run finished before test.logprobs existed is reported with its perplexity, untested;
    the p-values say which seed they are."""
    out = tmp_path / "cmp"
    experiment = write_experiment(tmp_path / "lm.yaml", lm_configs(tmp_path, lm_corpus, "previous", "mean"), out,
                                  seeds=(1, 2))
    assert run(["experiment", experiment, "--quiet"], capsys)[0] == 0
    (out / "systems/lm-mean/seed1/test.logprobs").unlink()
    code, stdout, _ = run(["experiment", experiment, "--report"], capsys)
    mean = json.loads((out / "report.json").read_text())["rows"][1]
    assert code == 0 and len(mean["delta"]) == 2 and list(mean["p_per_seed"]) == ["2"]
    p = mean["p_per_seed"]["2"]
    assert f"| 2: {'< 0.001' if p < 0.001 else f'{p:.3f}'} |" in stdout


def test_two_jobs_train_the_same_models_side_by_side(lm_corpus, tmp_path, capsys):
    [path] = lm_configs(tmp_path, lm_corpus, "previous")
    one, two = tmp_path / "one", tmp_path / "two"
    assert run(["experiment", write_experiment(tmp_path / "one.yaml", [path], one, seeds=(1, 2)), "--quiet"],
               capsys)[0] == 0
    code, _, err = run(["experiment", write_experiment(tmp_path / "two.yaml", [path], two, seeds=(1, 2)),
                        "--jobs", "2"], capsys)
    assert code == 0 and "lm-previous seed 1: finished" in err and "lm-previous seed 2: finished" in err
    rows = [json.loads((out / "report.json").read_text())["rows"] for out in (one, two)]
    for row in (*rows[0], *rows[1]):
        del row["minutes"]  # all but the training time
    assert rows[0] == rows[1]
    for seed in (1, 2):
        assert (one / f"systems/lm-previous/seed{seed}/test.logprobs").read_text() == \
            (two / f"systems/lm-previous/seed{seed}/test.logprobs").read_text()


def test_an_lm_experiment_does_not_report_a_run_of_an_older_definition_under_the_new_one(lm_corpus, tmp_path,
                                                                                         capsys):
    """A finished `self-attentive` LM trained before definitions 6 (start-inclusive) is not
    reported as eqs. 12–13: its record, or else its checkpoint, says which definitions it was
    trained under, and the experiment names the difference.  Such a finished run is restated
    in today's names (config.yaml, records), so a plan naming its computation accepts, scores
    and reports it; an export that tells neither (committed before records kept it) is
    restored and stands as saved."""
    from ctxnmt.models.migrations import DEFINITIONS

    [path] = lm_configs(tmp_path, lm_corpus, "self-attentive")
    old_name = tmp_path / "old.yaml"  # the same run, planned as the computation it was trained with
    old_name.write_text(path.read_text().replace("summary: self-attentive,", "summary: self-attentive-with-start,"))
    out = tmp_path / "cmp"
    names = ["lm-self-attentive"]
    experiment = write_experiment(tmp_path / "new.yaml", [path], out, names=names)
    as_trained = write_experiment(tmp_path / "as-trained.yaml", [old_name], out, names=names)
    assert run(["experiment", experiment, "--quiet"], capsys)[0] == 0
    run_dir = out / "systems/lm-self-attentive/seed1"
    records = {name: json.loads((run_dir / name).read_text()) for name in ("done.json", "results.json")}
    assert records["done.json"]["definitions"] == records["results.json"]["definitions"] == DEFINITIONS

    def trained_before_definitions_6(record_states_it: bool):
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "model": {**config["model"],
                                                                                 "summary": "self-attentive"}}))
        for name, record in records.items():
            stated = {k: v for k, v in record.items() if k != "definitions"}
            (run_dir / name).write_text(json.dumps({**stated, "definitions": 5} if record_states_it else stated))
        for checkpoint in (run_dir / "checkpoints").glob("*.pt"):
            torch.save({**torch.load(checkpoint, weights_only=True), "definitions": 5}, checkpoint)

    message = "model.summary is 'self-attentive-with-start' there but 'self-attentive'"
    for record_states_it in (True, False):  # its record says so, or (an older record) its checkpoint
        trained_before_definitions_6(record_states_it)
        code, _, err = run(["experiment", experiment, "--report"], capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1
        assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["summary"] == "self-attentive-with-start"
        assert json.loads((run_dir / "results.json").read_text())["definitions"] == DEFINITIONS  # restated
        code, stdout, _ = run(["experiment", as_trained, "--report"], capsys)
        assert code == 0 and "| lm-self-attentive | 1 | " in stdout
    trained_before_definitions_6(True)  # trained, not yet scored: scored as what it was trained with
    (run_dir / "results.json").unlink()
    code, _, err = run(["experiment", as_trained, "--quiet"], capsys)
    assert code == 0 and "experiment: lm-self-attentive seed 1: scoring its finished training" in err
    scored = json.loads((run_dir / "results.json").read_text())
    assert scored["definitions"] == DEFINITIONS and scored["test_ppl"] != pytest.approx(
        records["results.json"]["test_ppl"])  # the start-inclusive computation it was trained with, not eqs. 12–13
    code, stdout, _ = run(["lm", "score", run_dir, "-i", lm_corpus / "test.en"], capsys)
    assert code == 0 and f"perplexity {scored['test_ppl']:.2f} " in stdout
    committed = tmp_path / "committed"  # an export that tells nothing stands as saved
    assert run(["experiment", as_trained, "--report", "--export", committed], capsys)[0] == 0
    trained_before_definitions_6(False)
    for name in ("config.yaml", "done.json", "results.json"):
        shutil.copy(run_dir / name, committed / "systems/lm-self-attentive/seed1" / name)
    elsewhere = write_experiment(tmp_path / "elsewhere.yaml", [path], tmp_path / "elsewhere", names=names)
    code, stdout, err = run(["experiment", elsewhere, "--report", "--restore", committed], capsys)
    assert code == 0, err
    assert f"restored 1 runs from {committed}" in stdout and "| lm-self-attentive | 1 | " in stdout


def test_dry_run_lists_each_run_with_its_lm_train_command_and_trains_nothing(lm_corpus, tmp_path, capsys):
    configs = lm_configs(tmp_path, lm_corpus, "previous", "mean")
    out = tmp_path / "cmp"
    experiment = write_experiment(tmp_path / "lm.yaml", configs, out, seeds=(1, 2), updates=7,
                                  overrides=["training.lr=0.005"])
    code, stdout, err = run(["experiment", experiment, "--dry-run"], capsys)
    assert code == 0, err
    lines = stdout.splitlines()
    assert len(lines) == 8
    for i, (config, seed) in enumerate((c, s) for c in configs for s in (1, 2)):
        model_dir = out / "systems" / config.stem / f"seed{seed}"
        assert lines[2 * i] == f"{config.stem} seed {seed}: fresh, {model_dir}"
        assert lines[2 * i + 1] == (f"  ctxnmt lm train {config} --set training.lr=0.005 --set training.max_updates=7 "
                                    f"--set training.max_minutes=0 --set training.max_epochs=0 --set "
                                    f"training.seed={seed} --set model_dir={model_dir}")
    assert not out.exists()


@pytest.mark.parametrize("args", [["a.yaml", "--seeds", "1"], ["--seeds", "1", "--out", "cmp", "a.yaml"], ["--help"]])
def test_lm_compare_is_gone_and_names_the_experiment_that_replaces_it(args, capsys):
    code, out, err = run(["lm", "compare", *args], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "ctxnmt lm compare is gone" in err and "task: language-model" in err and "ctxnmt experiment" in err


@pytest.mark.parametrize("change, key, message", [
    ({"systems": "external"}, "output",
     "system 'ext': a language-model experiment trains every system; 'output' and 'ensemble' are a translation "
     "experiment's"),
    ({"systems": "ensemble"}, "ensemble",
     "system 'both': a language-model experiment trains every system; 'output' and 'ensemble' are a translation "
     "experiment's"),
    ({"significance": {"test": "bootstrap"}}, "significance.test",
     "significance.test: a language-model experiment tests by approximate randomisation (ar), got 'bootstrap'"),
    ({"significance": {"metric": "chrf"}}, "significance.metric",
     "significance.metric: a language-model experiment tests perplexity, the only metric"),
    ({"task": "parsing"}, "task", "task must be translation or language-model, got 'parsing'"),
])
def test_an_lm_experiment_refuses_what_only_translation_has_in_one_line(change, key, message, lm_corpus, tmp_path,
                                                                       capsys):
    configs = lm_configs(tmp_path, lm_corpus, "previous", "mean")
    out = tmp_path / "cmp"
    extra = {"external": [{"name": "ext", "output": str(tmp_path / "ext.en")}],
             "ensemble": [{"name": "both", "ensemble": ["lm-previous", "lm-mean"]}]}
    if "systems" in change:
        change = {"systems": [{"name": c.stem, "config": str(c)} for c in configs] + extra[change["systems"]]}
    experiment = write_experiment(tmp_path / "lm.yaml", configs, out, **change)
    for extra_args in ([], ["--dry-run"]):
        code, stdout, err = run(["experiment", experiment, "--quiet", *extra_args], capsys)
        assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
        assert f"ctxnmt experiment: error: {experiment}: {message}" in err and key in err
        assert not out.exists()
