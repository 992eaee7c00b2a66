"""The registry of the references behind the committed results, and `ctxnmt score`'s warning
when a reference of a registered name has other content."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxnmt.cli import main
from ctxnmt.evaluation import references
from ctxnmt.utils.io import file_sha256

ROOT = Path(__file__).resolve().parents[2]


def committed_ref_hashes(report_dir: Path) -> set[str]:
    """The reference hash every cached score and test of a committed report was keyed on."""
    keys = [json.loads(path.read_text(encoding="utf-8"))["key"]
            for pattern in ("systems/*/seed*/scores.json", "ensembles/*/seed*/scores.json", "significance/*.json")
            for path in report_dir.glob(pattern)]
    return {key["ref"] for key in keys}


def test_the_registry_holds_the_hash_the_committed_reports_were_scored_against():
    registered = references.load_registry()
    entry = registered["data/bible/test.en"]
    assert entry["reports"]
    for report in entry["reports"]:
        assert committed_ref_hashes(ROOT / report) == {entry["sha256"]}, report


@pytest.fixture
def registry(tmp_path):
    """A reference at data/bible/test.en under tmp_path, and a registry recording its hash."""
    ref = tmp_path / "data" / "bible" / "test.en"
    ref.parent.mkdir(parents=True)
    ref.write_text("In the beginning God created the heaven and the earth.\nAnd the earth was without form.\n",
                   encoding="utf-8")
    path = tmp_path / "references.json"
    path.write_text(json.dumps({"references": {"data/bible/test.en": {
        "sha256": file_sha256(ref), "built_from": {"sword-text-kjv": "14.3-1"}}}}), encoding="utf-8")
    return ref, path


def test_the_same_reference_is_not_warned_about_however_it_is_named(registry, monkeypatch):
    ref, path = registry
    assert references.reference_warning(ref, path) is None
    monkeypatch.chdir(ref.parent)
    assert references.reference_warning("./test.en", path) is None  # still data/bible/test.en


def test_a_changed_reference_is_named_with_both_hashes_and_its_source(registry):
    ref, path = registry
    recorded = file_sha256(ref)
    ref.write_text(ref.read_text(encoding="utf-8").replace("heaven", "heavens"), encoding="utf-8")
    warning = references.reference_warning(ref, path)
    assert "\n" not in warning and "not the data/bible/test.en the committed reports were scored against" in warning
    assert recorded[:12] in warning and file_sha256(ref)[:12] in warning and "sword-text-kjv 14.3-1" in warning


def test_a_reference_the_registry_does_not_name_is_not_checked(registry, tmp_path):
    _, path = registry
    other = tmp_path / "mine" / "test.en"  # another corpus's test.en: not the Bible's
    other.parent.mkdir()
    other.write_text("something else\n", encoding="utf-8")
    assert references.reference_warning(other, path) is None
    assert references.reference_warning(other, tmp_path / "absent.json") is None  # no registry: no check


def test_score_warns_on_stderr_once_and_still_scores(registry, monkeypatch, capsys):
    ref, path = registry
    monkeypatch.setattr(references, "REGISTRY", path)
    hyp = ref.parent / "hyp.en"
    hyp.write_text(ref.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["score", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "chrf"]) == 0
    assert capsys.readouterr().err == ""
    ref.write_text(ref.read_text(encoding="utf-8").upper(), encoding="utf-8")
    assert main(["score", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "chrf"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("warning: ") and "chrF2" in captured.out
