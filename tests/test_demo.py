"""`make demo` trains a fixed budget (configs/demo.yaml), so README and docs/demo.md can
print the BLEU it reaches: they must agree with the config, the Makefile and the committed
record of the measured run (experiments/results/demo/), and that record with the corpus."""
from __future__ import annotations

import json
import re
from pathlib import Path

from ctxnmt.config import load_config
from tests.conftest import needs_diatheke

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "experiments" / "results" / "demo"


def recorded_bleu() -> float:
    """From `ctxnmt score --json` of the measured run's test output."""
    record = json.loads((RECORD / "score.json").read_text(encoding="utf-8"))
    return record["systems"][0]["scores"]["bleu"]["value"]


def test_make_demo_trains_the_demo_config():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^DEMO_CONFIG \?= configs/demo\.yaml$", makefile, re.M)
    assert re.search(r"^DEMO_MINUTES \?=$", makefile, re.M), "no wall-clock cap unless asked for"


def test_the_measured_run_trained_what_the_config_says():
    shipped = load_config(ROOT / "configs" / "demo.yaml").training
    measured = load_config(RECORD / "config.yaml")
    assert measured.training == shipped and measured.model == load_config(ROOT / "configs" / "demo.yaml").model
    # decoded with the shipped decoding settings, as a fresh `make demo` decodes
    assert measured.decoding == load_config(ROOT / "configs" / "demo.yaml").decoding
    log = (RECORD / "train.log").read_text(encoding="utf-8")
    assert f"update {shipped.max_updates}:" in log and f"update {shipped.max_updates + 50}:" not in log


def test_readme_and_docs_print_the_budget_and_the_bleu_of_the_record():
    budget = f"{load_config(ROOT / 'configs' / 'demo.yaml').training.max_updates:,} updates"
    bleu = f"**{recorded_bleu():.2f} BLEU**"
    for doc in ("README.md", "docs/demo.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        assert bleu in text, f"{doc} does not print the measured {bleu}"
        assert budget in text, f"{doc} does not state the budget ({budget})"


@needs_diatheke
def test_the_committed_output_scores_the_recorded_bleu(bible_corpus):
    from ctxnmt.evaluation.metrics import bleu

    corpus, _ = bible_corpus
    hyps = (RECORD / "test.hyp.en").read_text(encoding="utf-8").splitlines()
    refs = (corpus / "test.en").read_text(encoding="utf-8").splitlines()
    assert round(bleu(hyps, refs).value, 2) == round(recorded_bleu(), 2)
