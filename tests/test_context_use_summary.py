"""experiments/results/context-use/summarise.py: its paired randomisation test on literal outcomes, and the
committed summary.md is what the script writes from the committed measurements.

The script is a standalone experiment, not part of the package, so it is loaded from its path."""
from __future__ import annotations

import importlib.util
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from ctxnmt.evaluation.significance import mcnemar

ROOT = Path(__file__).resolve().parent.parent
DIR = ROOT / "experiments" / "results" / "context-use"


def _load():
    spec = importlib.util.spec_from_file_location("context_use_summarise", DIR / "summarise.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


summarise = _load()


def test_paired_randomisation_is_exact_over_the_examples_seed_summed_differences():
    a = lambda *xs: np.array(xs, dtype=bool)  # noqa: E731
    # two seeds, six examples: differences +2, +1, +1, 0, -1, +1, sum 4.  Under the null the
    # sum is (+-2) + four (+-1), 32 equally likely sign patterns; |sum| >= 4 in 10 of them
    # (+2 with three or four of the ones positive: 4 + 1; the mirror images: 5)
    first = [a(1, 1, 0, 1, 0, 1), a(1, 0, 1, 0, 0, 0)]
    second = [a(0, 0, 0, 1, 1, 0), a(0, 0, 0, 0, 0, 0)]
    assert summarise.paired_randomisation(first, second) == pytest.approx(10 / 32)
    # an example one seed gets right and the other wrong under both conditions (difference 0)
    # is no evidence either way
    assert summarise.paired_randomisation([a(1), a(0)], [a(0), a(1)]) == 1.0
    # six examples all one way: 2 / 2**6
    assert summarise.paired_randomisation([a(1, 1, 1, 1, 1, 1)], [a(0, 0, 0, 0, 0, 0)]) == pytest.approx(0.03125)


def test_on_one_seed_it_is_mcnemars_exact_test():
    rng = np.random.default_rng(3)
    first, second = rng.random(60) < 0.7, rng.random(60) < 0.5
    assert summarise.paired_randomisation([first], [second]) == pytest.approx(mcnemar(first, second))


def test_a_sentence_model_reads_the_same_under_every_condition(tmp_path):
    run = tmp_path / "seed1"
    run.mkdir()
    # correct candidate first: example 1 right (-1 > -2), example 2 wrong (-3 < -2)
    (run / "contrastive-test.json").write_text(json.dumps({"examples": 2, "scores": {"own": [[-1, -2], [-3, -2]]}}))
    ok = summarise.outcomes(run)
    assert [ok[c].tolist() for c in ("own", "none", "other")] == [[True, False]] * 3


def test_committed_summary_is_what_the_script_writes():
    out = io.StringIO()
    with redirect_stdout(out):
        assert summarise.main([]) == 0
    assert out.getvalue() == (DIR / "summary.md").read_text(encoding="utf-8")


def test_the_page_s_table_is_what_the_script_writes():
    """docs/context-use.md holds the table over seeds between the script's markers."""
    page = (ROOT / "docs" / "context-use.md").read_text(encoding="utf-8")
    assert summarise.page_block() in page


def test_the_antecedent_distances_split_the_examples_once_each():
    masks = [summarise.at_distance(d) for d in summarise.DISTANCES.values()]
    assert (np.sum(masks, axis=0) == 1).all()
    examples = json.loads(summarise.EXAMPLES.read_text())
    assert int(masks[1].sum()) == sum(e["ante distance"] == 1 for e in examples)


def test_the_one_verse_back_cell_is_the_pooled_accuracy_on_those_examples():
    """Written from the reports directly: right = the correct side scores above every contrastive one."""
    examples = json.loads(summarise.EXAMPLES.read_text())
    rows = [i for i, e in enumerate(examples) if e["ante distance"] == 1]
    right, seen = 0, 0
    for run in sorted((DIR / "baseline").glob("seed*")):
        scores = json.loads((run / "contrastive-test.json").read_text())["scores"]["own"]
        right += sum(scores[i][0] > max(scores[i][1:]) for i in rows)
        seen += len(rows)
    line = next(x for x in summarise.distance_table([DIR / "baseline"]) if x.startswith("| baseline"))
    assert line.split(" | ")[3] == " / ".join([f"{right / seen:.3f}"] * 3)
