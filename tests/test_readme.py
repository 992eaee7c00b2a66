"""README.md says what the code does.

- Its walkthrough ("Your own data") runs as written.  The section's `sh` block cuts a corpus
  from `data/bible`, its `yaml` block is the config, and its `text` block is a transcript:
  `$ command` lines, each followed by what the command prints.  The test runs them in a scratch
  directory, on a tiny made-up `data/bible` and with a tiny budget and model (the only changes it
  makes to the config), and checks every printed line against the transcript with its numbers
  left open.
  Its document model and its Python example run as written too, on the same corpus.
- Its quick-start example prints the demo's recorded translation of a test verse.
- Its verdict table says what docs/results.md's table (the committed reports) says.
- Every `ctxnmt …` command it shows names a command and options that exist.
"""
from __future__ import annotations

import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import argparse

import pytest
import yaml

from ctxnmt.cli import build_parser
from ctxnmt.experiments import summary
from tests.conftest import needs_diatheke

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
WALKTHROUGH = "## Your own data"
DOCUMENT_MODEL = "### A document model"
PYTHON = "### From Python"
TINY = {"model": {"emb_dim": 8, "hidden_dim": 16, "att_dim": 16},
        "training": {"max_updates": 4, "max_minutes": 0, "valid_every": 2, "log_every": 2, "valid_beam": 2},
        "decoding": {"beam": 2}}


def section(title: str) -> str:
    """From the heading `title` to the next heading of level 2 or 3."""
    start = README.index(title + "\n")
    ends = [end for end in (README.find("\n## ", start + 1), README.find("\n### ", start + 1)) if end > 0]
    return README[start:min(ends, default=len(README))]


def blocks(text: str) -> dict[str, str]:
    """The fenced blocks of a section by language (one of each)."""
    found = re.findall(r"^```(\w+)\n(.*?)^```", text, re.S | re.M)
    languages = [language for language, _ in found]
    assert len(languages) == len(set(languages)), f"one block per language expected, got {languages}"
    return dict(found)


def transcript(text: str) -> list[tuple[str, list[str]]]:
    """(command, the lines it prints) for each `$ ` line of a transcript."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip():
            steps[-1][1].append(line)
    return steps


def pattern(line: str) -> re.Pattern:
    """A printed line with its numbers open ('1,994', '0.07', '2.6.0') and '…' for anything."""
    parts = re.split(r"(\d[\d,.]*|…)", line)
    return re.compile("".join(r"[\d,.]+" if re.fullmatch(r"\d[\d,.]*", p) else ".*" if p == "…" else re.escape(p)
                              for p in parts))


def made_up_bible(directory: Path) -> None:
    """data/bible/{train,dev,test}.{es,en}: a word-for-word toy language pair."""
    rng = random.Random(0)
    words = [(f"palabra{i}", f"word{i}") for i in range(30)]
    directory.mkdir(parents=True)
    for split, n in (("train", 80), ("dev", 6), ("test", 6)):
        pairs = [[rng.choice(words) for _ in range(rng.randint(3, 7))] for _ in range(n)]
        for side, lang in ((0, "es"), (1, "en")):
            text = "\n".join(" ".join(w[side] for w in sentence) + " ." for sentence in pairs) + "\n"
            (directory / f"{split}.{lang}").write_text(text, encoding="utf-8")
        (directory / f"{split}.doc").write_text("".join(f"{split}{i // 3}\n" for i in range(n)), encoding="utf-8")


def merge(base: dict, changes: dict) -> dict:
    out = dict(base)
    for key, value in changes.items():
        out[key] = merge(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def ctxnmt(command: str, cwd: Path) -> subprocess.CompletedProcess:
    args = shlex.split(command)
    assert args[0] == "ctxnmt", command
    return subprocess.run([sys.executable, "-m", "ctxnmt", *args[1:]], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_the_walkthrough_config_is_complete():
    config = yaml.safe_load(blocks(section(WALKTHROUGH))["yaml"])
    assert {"base", "name", "model_dir", "data"} <= set(config)
    assert (ROOT / config["base"]).is_file(), "base: is relative to the config, which lives in the root"
    assert config["data"]["corpus"] == "files"
    assert config["training"].get("max_updates") or config["training"].get("max_minutes"), "a budget"


@pytest.fixture(scope="module")
def walked(tmp_path_factory) -> Path:
    """A scratch directory where the walkthrough ran as written (its config made tiny)."""
    here = tmp_path_factory.mktemp("walkthrough")
    parts = blocks(section(WALKTHROUGH))
    made_up_bible(here / "data" / "bible")
    cut = subprocess.run(["bash", "-euo", "pipefail", "-c", parts["sh"]], cwd=here, capture_output=True, text=True)
    assert cut.returncode == 0, cut.stderr

    steps = transcript(parts["text"])
    assert steps[0][0] == "source .venv/bin/activate"  # the commands below run with this interpreter instead
    config_file = shlex.split(steps[1][0])[2]
    config = yaml.safe_load(parts["yaml"])
    config["base"] = str(ROOT / config["base"])
    (here / config_file).write_text(yaml.safe_dump(merge(config, TINY)), encoding="utf-8")
    run_transcript(steps[1:], here)
    return here


def test_the_walkthrough_runs_as_written(walked):
    assert (walked / "runs" / "my-model" / "checkpoints" / "best.pt").is_file()


def run_transcript(steps: list[tuple[str, list[str]]], tmp_path: Path) -> None:
    """Run each command and find each line the transcript shows it print in what it printed."""
    for command, printed in steps:
        done = ctxnmt(command, tmp_path)
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
        out = done.stdout.splitlines()
        if not printed:
            assert out == [], f"{command} printed {out}, the README shows nothing"
        for line in printed:
            assert any(pattern(line).fullmatch(o) for o in out), f"{command}: no line like {line!r} in {out}"
        args = shlex.split(command)
        if args[1] == "translate":
            src, hyp = args[args.index("-i") + 1], args[args.index("-o") + 1]
            assert len((tmp_path / hyp).read_text(encoding="utf-8").splitlines()) == \
                len((tmp_path / src).read_text(encoding="utf-8").splitlines())


def test_the_document_model_trains_and_translates_as_written(walked):
    """Its config (on the walkthrough's, made tiny there), then the transcript, as written."""
    parts = blocks(section(DOCUMENT_MODEL))
    steps = transcript(parts["text"])
    config_file = shlex.split(steps[0][0])[2]
    config = yaml.safe_load(parts["yaml"])
    assert config["base"] == shlex.split(transcript(blocks(section(WALKTHROUGH))["text"])[1][0])[2]
    assert config["model"]["context"] != "none"
    (walked / config_file).write_text(yaml.safe_dump(config), encoding="utf-8")
    run_transcript(steps, walked)
    assert any("--doc-ids" in command for command, _ in steps)


def test_the_python_example_translates_as_written(walked):
    code = blocks(section(PYTHON))["python"]
    done = subprocess.run([sys.executable, "-c", code], cwd=walked, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1  # one translation for its one sentence


def readme_commands() -> list[str]:
    """Every `ctxnmt …` of the README: in its code blocks (after `$ `, `| ` or `.venv/bin/`) and in
    its inline code (the commands table among it), with `\\|` between alternatives kept."""
    found = []
    for _, body in re.findall(r"^```(\w+)\n(.*?)^```", README, re.S | re.M):
        found += re.findall(r"(?:^|\$ |\| |/)(ctxnmt [^\n|]+)", body, re.M)
    text = re.sub(r"^```\w+\n.*?^```", "", README, flags=re.S | re.M)
    found += [" ".join(span.split()) for span in re.findall(r"`(ctxnmt [^`]+)`", text)]
    return found


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def alternatives(words: list[str]) -> tuple[list[str], list[str]]:
    """`a | b | c rest…` → ([a, b, c], [rest…])."""
    names, rest = words[:1], words[1:]
    while len(rest) >= 2 and rest[0] == "|":
        names.append(rest[1])
        rest = rest[2:]
    return names, rest


def command_problems(command: str, parser: argparse.ArgumentParser) -> list[str]:
    """What of `command` the parser lacks: a (sub-)command, or an option of the command it names.
    `a \\| b` lists alternative sub-commands; the options after them must be one of theirs."""
    words = command.replace("\\|", "|").split()[1:]
    parsers = [parser]
    while words and subparsers(parsers[0]) and not words[0].startswith("-"):
        names, words = alternatives(words)
        here = subparsers(parsers[0])
        # a command that is gone keeps a parser that says so (`lm compare`): not one that exists
        unknown = [name for name in names if name not in here or here[name].description.startswith("gone")]
        if unknown:
            return [f"{command}: no command {unknown[0]}"]
        parsers = [subparsers(parsers[0])[name] for name in names]
    options = [word.lstrip("[").split("=")[0].rstrip("]") for word in words if word.lstrip("[").startswith("-")]
    known = {option for p in parsers for action in p._actions for option in action.option_strings}
    return [f"{command}: no option {option}" for option in options if option not in known]


def test_every_command_in_the_readme_exists():
    """The commands table listed `ctxnmt lm … compare` after it was gone."""
    commands = readme_commands()
    assert len(commands) >= 20 and "ctxnmt score contrastive MODEL_DIR [MODEL_DIR …] FILE" in commands
    parser = build_parser()
    assert [problem for command in commands for problem in command_problems(command, parser)] == []


def test_the_check_finds_a_missing_command_or_option():
    parser = build_parser()
    assert command_problems("ctxnmt lm train \\| compare …", parser) == [
        "ctxnmt lm train \\| compare …: no command compare"]
    assert command_problems("ctxnmt translate M [--beam-size 5]", parser) == [
        "ctxnmt translate M [--beam-size 5]: no option --beam-size"]
    assert command_problems("ctxnmt judge create \\| serve \\| report --port 1", parser) == []
    assert command_problems("ctxnmt analyze target-attention \\| trees MODEL_DIR --trees T", parser) == []


def quick_start_example() -> tuple[str, str]:
    text = section("## Quick start")
    source = re.search(r'^echo "(.+)" \| \.venv/bin/ctxnmt translate runs/demo$', text, re.M).group(1)
    output = re.search(r"^It prints `([^`]+)`", text, re.M).group(1)
    return source, output


def test_the_quick_start_prints_the_demo_s_recorded_translation():
    _, output = quick_start_example()
    assert output in (ROOT / "experiments/results/demo/test.hyp.en").read_text(encoding="utf-8").splitlines()


@needs_diatheke
def test_the_quick_start_translates_a_test_verse(bible_corpus):
    source, output = quick_start_example()
    corpus, _ = bible_corpus
    sources = (corpus / "test.es").read_text(encoding="utf-8").splitlines()
    outputs = (ROOT / "experiments/results/demo/test.hyp.en").read_text(encoding="utf-8").splitlines()
    assert outputs[sources.index(source)] == output


def test_the_verdict_table_is_the_results_page_s():
    results = summary.load_results(ROOT)
    claims = {claim.system: claim for claim in summary.CLAIMS}
    rows = tables(section("## Does each paper's method work?"))[0]
    assert len(rows) >= 8
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        system = re.search(r"`([^`]+)`", cells[1]).group(1)
        expected = summary.cells(claims[system], results[system])
        paper, delta, seeds = expected[1], expected[3], expected[2]
        verdict = summary.verdict(claims[system], results[system])
        assert cells[2] == paper, system
        assert cells[3] == f"{delta} ({seeds})", system
        assert cells[4].startswith(verdict), system


def tables(text: str) -> list[list[str]]:
    """The markdown tables of `text`, each as its rows below the header and rule."""
    found, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            found.append(rows[2:])
            rows = []
    return found


def test_the_document_model_rows_are_the_context_use_summary_s():
    """README's second verdict table states each document model's numbers as
    experiments/results/context-use/summarise.py computes them from the committed measurements."""
    import importlib.util

    import numpy as np

    path = ROOT / "experiments" / "results" / "context-use" / "summarise.py"
    spec = importlib.util.spec_from_file_location("context_use_summarise_readme", path)
    summarise = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summarise)
    rows = tables(section("## Does each paper's method work?"))[1]
    assert len(rows) >= 2
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        system = summarise.HERE / re.search(r"`([^`]+)`", cells[0]).group(1)
        seeds = summarise.runs(system)
        bleu = np.mean([summarise.bleu(r) for r in seeds])
        cxmi = np.mean([summarise.cxmi(r)["other"]["cxmi"] for r in seeds])
        ok = [summarise.outcomes(r) for r in seeds]
        pronouns = " / ".join(f"{np.mean([o[c] for o in ok]):.3f}" for c in ("own", "other"))
        assert cells[1:4] == [f"{bleu:.2f} ({len(seeds)})", f"{cxmi:+.4f}", pronouns], system.name
