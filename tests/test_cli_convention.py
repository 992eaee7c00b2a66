"""One convention for every command: descriptions, positionals with help, MODEL_DIR, and
-i/--input, -o/--output, -r/--ref wherever a command reads a source, writes its output or
reads a reference (older spellings kept as aliases); `ctxnmt`, `ctxnmt --version`, and the
flags a user meets first (`train --max-updates`, `serve --device`)."""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import re

import pytest

from ctxnmt import cli
from ctxnmt.cli import build_parser, main
from tests.test_cli import command_paths, run, small_corpus, write_config

# What an option's dest says it is: the shared spelling it must accept.
CONVENTION = {
    "ref": ("-r", "--ref"), "reference": ("-r", "--ref"),
    "input": ("-i", "--input"), "src": ("-i", "--input"),
    "output": ("-o", "--output"), "out": ("-o", "--output"), "out_dir": ("-o", "--output"),
}
# `data bible --out DIR` lives with the data path (ctxnmt/data/commands.py), being rewritten
# apart; it is to take -o/--output there.
NOT_YET = {(("data", "bible"), "out")}


def parser_at(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def convention_breaches(path: tuple[str, ...], parser: argparse.ArgumentParser) -> list[str]:
    found = [] if parser.description else [f"{' '.join(path)}: no description"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if not action.option_strings:
            if not action.help:
                found.append(f"{' '.join(path)} {action.dest}: a positional without help")
            if action.dest.startswith("model_dir") and action.metavar != "MODEL_DIR":
                found.append(f"{' '.join(path)} {action.dest}: a model directory not named MODEL_DIR")
            continue
        wanted = CONVENTION.get(action.dest, ())
        if not set(wanted) <= set(action.option_strings) and (path, action.dest) not in NOT_YET:
            found.append(f"{' '.join(path)} {'/'.join(action.option_strings)}: wants {'/'.join(wanted)}")
    return found


def test_every_command_follows_the_convention():
    paths = command_paths(build_parser())
    assert len(paths) > 20
    assert [breach for path in paths for breach in convention_breaches(path, parser_at(path))] == []


def test_the_walk_finds_a_breach():
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("study")
    parser.add_argument("--reference")
    parser.add_argument("-o", "--out-dir")
    assert convention_breaches(("x",), parser) == [
        "x: no description", "x study: a positional without help", "x --reference: wants -r/--ref",
        "x -o/--out-dir: wants -o/--output"]


@pytest.mark.parametrize("argv, dest", [
    (["score", "--hyp", "H", "--ref", "R"], "ref"),
    (["score", "--hyp", "H", "-r", "R"], "ref"),
    (["score", "--hyp", "H", "-r", "x", "--src", "R"], "src"),
    (["score", "--hyp", "H", "-r", "x", "-i", "R"], "src"),
    (["analyze", "alignment", "M", "-i", "S", "--silver", "--reference", "R"], "reference"),
    (["analyze", "alignment", "M", "-i", "S", "--silver", "-r", "R"], "reference"),
    (["analyze", "alignment", "M", "-i", "S", "--silver", "--ref", "R"], "reference"),
    (["judge", "create", "--system", "a=b", "-o", "x", "--src", "R"], "src"),
    (["judge", "create", "--system", "a=b", "-o", "x", "--input", "R"], "src"),
    (["judge", "create", "--system", "a=b", "-o", "x", "-i", "S", "-r", "R"], "ref"),
    (["analyze", "context", "M", "-i", "S", "--doc-ids", "D", "-r", "x", "--out-dir", "R"], "out_dir"),
    (["analyze", "context", "M", "-i", "S", "--doc-ids", "D", "-r", "x", "-o", "R"], "out_dir"),
])
def test_the_old_spellings_still_work_beside_the_shared_ones(argv, dest):
    assert getattr(build_parser().parse_args(argv), dest) == "R"


def test_several_model_directories_are_one_positional():
    args = build_parser().parse_args(["translate", "a", "b", "-i", "x"])
    assert args.model_dirs == ["a", "b"]
    assert build_parser().parse_args(["serve", "a"]).model_dirs == ["a"]


@pytest.mark.parametrize("command", ["translate", "serve"])
def test_a_command_without_its_model_directory_names_MODEL_DIR_once(command, capsys):
    """It said 'the following arguments are required: model_dir, MODEL_DIR'."""
    with pytest.raises(SystemExit) as stopped:
        main([command])
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err.strip().splitlines()[-1] == f"ctxnmt {command}: error: the following arguments are required: MODEL_DIR"


def test_a_bare_ctxnmt_prints_the_help_and_succeeds(capsys):
    code, out, err = run([], capsys)
    assert code == 0 and err == ""
    assert out.startswith("usage: ctxnmt ") and "Context-aware recurrent NMT toolkit." in out
    assert all(f"    {name} " in out or f"    {name}\n" in out for name in ("train", "translate", "score", "serve"))


def test_version_is_the_installed_packages(capsys, monkeypatch):
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"ctxnmt {importlib.metadata.version('ctxnmt')}\n"

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(cli.importlib.metadata, "version", not_installed)
    assert cli.version() == "unknown (not installed: pip install -e .)"


def test_train_max_updates_stops_there_and_wins_over_the_config(tmp_path, capsys):
    """And the last line gives the best dev BLEU as the log does (it printed 0.02392526380951398)."""
    cfg = write_config(tmp_path / "c.yaml", small_corpus(tmp_path), tmp_path / "m")  # max_updates: 40
    code, out, err = run(["train", cfg, "--max-updates", "3", "--set", "training.max_updates=5",
                          "--set", "training.threads=1"], capsys)
    assert code == 0, err
    assert re.fullmatch(rf"{tmp_path / 'm'}: 3 updates, stopped because reached 3 updates; best dev bleu: \d+\.\d\d\n",
                        out)
    assert json.loads((tmp_path / "m" / "done.json").read_text())["update"] == 3
    last = (tmp_path / "m" / "train.log").read_text().splitlines()[-1]
    assert re.search(r"training stopped: reached 3 updates; 3 updates in [\d.]+ min, best dev bleu \d+\.\d\d$", last)
    assert "\r" not in err  # stderr is no terminal here: no progress bar redrawn in place


def test_the_language_model_takes_the_same_budget_flags_after_its_set_items():
    from ctxnmt.training.budget import budget_overrides

    args = build_parser().parse_args(["lm", "train", "c.yaml", "--max-updates", "3", "--set", "training.seed=2"])
    assert [*args.overrides, *budget_overrides(args)] == ["training.seed=2", "training.max_updates=3"]
    args = build_parser().parse_args(["train", "c.yaml", "--max-minutes", "1.5"])
    assert budget_overrides(args) == ["training.max_minutes=1.5"]


def test_serve_device_is_passed_to_the_model_and_checked_before_loading(tmp_path, capsys, monkeypatch):
    import ctxnmt.serve.commands as serve_commands
    from ctxnmt.errors import CtxnmtError

    assert build_parser().parse_args(["serve", "m"]).device == "cpu"
    loaded = {}

    def load(model_dir, **options):
        loaded.update(options, model_dir=model_dir)
        raise CtxnmtError("stop here")

    monkeypatch.setattr(serve_commands.Translator, "load", load)
    code, _, _ = run(["serve", tmp_path, "--device", "cpu"], capsys)
    assert code == 2 and loaded == {"model_dir": str(tmp_path), "checkpoint": None, "device": "cpu",
                                    "ensemble_mode": "logprob"}
    for device, said in (("gpu", "--device must be cpu, cuda or cuda:N, got 'gpu'"),
                         ("cuda:99", "--device cuda:99: ")):
        loaded.clear()
        code, _, err = run(["serve", tmp_path, "--device", device], capsys)
        assert code == 2 and err.startswith(f"ctxnmt serve: error: {said}") and loaded == {}
