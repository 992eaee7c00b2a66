"""README.md says what the code does.

- Its walkthrough ("Your own data") runs as written.  The section's `sh` block cuts a corpus
  from `data/bible`, its `yaml` block is the config, and its `text` block is a transcript:
  `$ command` lines, each followed by what the command prints.  The test runs them in a scratch
  directory, on a tiny made-up `data/bible` and with a tiny budget and model (the only changes it
  makes to the config), and checks every printed line against the transcript with its numbers
  left open.
- Its quick-start example prints the demo's recorded translation of a test verse.
- Its verdict table says what docs/results.md's table (the committed reports) says.
"""
from __future__ import annotations

import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from ctxnmt.experiments import summary
from tests.conftest import needs_diatheke

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
WALKTHROUGH = "## Your own data"
TINY = {"model": {"emb_dim": 8, "hidden_dim": 16, "att_dim": 16},
        "training": {"max_updates": 4, "max_minutes": 0, "valid_every": 2, "log_every": 2, "valid_beam": 2},
        "decoding": {"beam": 2}}


def section(title: str) -> str:
    start = README.index(title + "\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else len(README)]


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


def test_the_walkthrough_runs_as_written(tmp_path):
    parts = blocks(section(WALKTHROUGH))
    made_up_bible(tmp_path / "data" / "bible")
    cut = subprocess.run(["bash", "-euo", "pipefail", "-c", parts["sh"]], cwd=tmp_path, capture_output=True,
                         text=True)
    assert cut.returncode == 0, cut.stderr

    steps = transcript(parts["text"])
    assert steps[0][0] == "source .venv/bin/activate"  # the commands below run with this interpreter instead
    config_file = shlex.split(steps[1][0])[2]
    config = yaml.safe_load(parts["yaml"])
    config["base"] = str(ROOT / config["base"])
    (tmp_path / config_file).write_text(yaml.safe_dump(merge(config, TINY)), encoding="utf-8")

    for command, printed in steps[1:]:
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
    rows = [line for line in section("## Does each paper's method work?").splitlines() if line.startswith("| ")][1:]
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
