"""docs/results.md's at-a-glance table says what the committed reports say.

Each row names its system as the report does (in backticks); its seeds, Δ, p-values and
smallest detectable Δ must be the report's own numbers at the table's precision, so a
re-exported report that moves a number fails here until the page follows it.  The table is
written by `python -m ctxnmt.experiments.summary`; the page must hold what it writes.
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from ctxnmt.experiments import summary

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "results.md"
REPORTS = {"translation": ROOT / "experiments/results/reproduction/report.json",
           "lm": ROOT / "experiments/results/lm/report.json"}


def glance_rows() -> list[list[str]]:
    """The table's body rows, each as its cells."""
    table = [line for line in summary.block(PAGE.read_text(encoding="utf-8")).split("\n\n")[0].splitlines()
             if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]]


def signed(x: float, unit: str = "") -> str:
    return f"{x:+.2f}".replace("-", "−") + unit


def p_value(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def without_label(cell: str) -> str:
    """A p cell's number, without its '(worse)'."""
    return re.sub(r"\s*\(.*\)$", "", cell.strip())


def expected_translation(row: dict) -> tuple[str, str, str, str]:
    """(seeds, Δ, p cell, detectable) as the reproduction report gives them."""
    sig = row["significance"]
    if len(row["seeds"]) == 1:
        return "1", signed(sig["deltas"][0]), p_value(sig["p_values"][0]), "–"
    pooled, seeds_t = sig["over_seeds"], sig["seeds_t"]
    return (str(len(row["seeds"])), signed(pooled["delta"]),
            f"{p_value(pooled['p_value'])} / {p_value(seeds_t['p_value'])}", f"{seeds_t['detectable']:.2f}")


def expected_lm(row: dict) -> tuple[str, str, str, str]:
    t = row["t_over_seeds"]
    return (str(len(row["paired_seeds"])), signed(row["delta_mean"], " ppl"),
            f"{p_value(row['p_over_seeds'])} / {p_value(t['p_value'])}", f"{t['detectable']:.2f}")


@functools.cache
def report_rows() -> dict[str, dict]:
    """Every committed report's rows by system name, read once for all the table's rows."""
    rows = {}
    for kind, path in REPORTS.items():
        for row in json.loads(path.read_text(encoding="utf-8"))["rows"]:
            rows[row["system"]] = {"kind": kind, **row}
    return rows


ROWS = glance_rows()


def test_the_table_has_every_published_system():
    assert len(ROWS) >= 10
    assert all(re.search(r"`[^`]+`", cells[0]) for cells in ROWS), "every row names its report system"


@pytest.mark.parametrize("cells", ROWS, ids=lambda cells: re.search(r"`([^`]+)`", cells[0]).group(1))
def test_each_row_is_its_report_s_numbers(cells):
    name = re.search(r"`([^`]+)`", cells[0]).group(1)
    reports = report_rows()
    assert name in reports, f"{name}: in no committed report"
    row = reports[name]
    seeds, delta, p_cell, detectable = (expected_lm if row["kind"] == "lm" else expected_translation)(row)
    stated_p = " / ".join(without_label(part) for part in cells[4].split(" / "))
    assert (cells[2], cells[3], stated_p, cells[5]) == (seeds, delta, p_cell, detectable)


def test_the_page_holds_what_the_summary_command_writes():
    assert summary.block(PAGE.read_text(encoding="utf-8")) == summary.markdown(ROOT), \
        "run `python -m ctxnmt.experiments.summary --update docs/results.md`"


def test_the_document_models_rows_are_their_report_s():
    """The table beyond the papers (issue 62) states each document model's seeds, BLEU, Δ and
    p as experiments/results/document-models/report.json gives them."""
    rows = {r["system"]: r for r in json.loads((ROOT / summary.REPORTS["documents"]).read_text())["rows"]}
    tables = summary.block(PAGE.read_text(encoding="utf-8")).split("\n\n")
    beyond = next(t for t in tables if t.startswith("| document model"))
    body = [[c.strip() for c in line.strip("|").split("|")] for line in beyond.splitlines()[2:]]
    assert body, "no document model row"
    for cells in body:
        system = re.search(r"`([^`]+)`", cells[0]).group(1)
        seeds, delta, p, _ = expected_translation(rows[system])
        assert [cells[1], cells[3], cells[4]] == [seeds, delta, p], system
        assert cells[2] == f"{rows[system]['mean']['bleu']:.2f}", system
