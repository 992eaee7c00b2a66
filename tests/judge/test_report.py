"""`ctxnmt judge report`: the statistics against published worked examples, and the table
from a study answered through the library by three judges."""
from __future__ import annotations

import csv
import io

import pytest

from ctxnmt.judge.report import cohen_kappa, fleiss_kappa, sign_test
from ctxnmt.judge.study import next_item, open_study, record_answer
from tests.judge.common import write_study_inputs
from tests.test_cli import run


def test_sign_test_known_values():
    # 10 against 2: two-sided 2 · P(X ≤ 2 | n = 12, p = 1/2) = 2 · (1 + 12 + 66) / 4096
    assert sign_test(10, 2) == pytest.approx(158 / 4096)
    assert sign_test(2, 10) == pytest.approx(158 / 4096)
    assert sign_test(3, 3) == pytest.approx(1.0)
    assert sign_test(0, 0) == 1.0


def test_cohen_kappa_worked_example():
    # 50 items: both yes 20, yes/no 5, no/yes 10, both no 15 → p_o = 0.7, p_e = 0.5, κ = 0.4
    first = ["y"] * 25 + ["n"] * 25
    second = ["y"] * 20 + ["n"] * 5 + ["y"] * 10 + ["n"] * 15
    assert cohen_kappa(first, second, categories=("y", "n")) == pytest.approx(0.4)
    assert cohen_kappa([">", "<"], [">", "<"]) == pytest.approx(1.0)


def test_fleiss_kappa_worked_example():
    # Fleiss (1971) as tabulated in the usual worked example: 10 subjects, 14 raters, 5 categories
    counts = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
              [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    assert fleiss_kappa(counts) == pytest.approx(0.20993, abs=1e-5)
    with pytest.raises(ValueError):
        fleiss_kappa([[1, 1], [2, 1]])


def ranked_as(db, judge: str, rank_of_a: dict[str, str]) -> None:
    """Answer every item so that the pair's first system gets rank_of_a[pair] (>, =, <)."""
    while (item := next_item(db, judge)) is not None:
        sys_a, sys_b, left_is_a = db.execute("SELECT sys_a, sys_b, left_is_a FROM items WHERE id = ?",
                                             (item["item"],)).fetchone()
        rank = rank_of_a[f"{sys_a}-{sys_b}"]
        choice = "equal" if rank == "=" else ("left" if (rank == ">") == bool(left_is_a) else "right")
        record_answer(db, judge, item["item"], choice)


def create_study(tmp_path, capsys):
    study = tmp_path / "study.sqlite"
    assert run(["judge", "create", *write_study_inputs(tmp_path), "--n", "5", "-o", study], capsys)[0] == 0
    return study


def test_report_counts_with_three_judges(tmp_path, capsys):
    study = create_study(tmp_path, capsys)
    with open_study(study) as db:
        # judged items per pair: base-mean 2, base-self 2, mean-self 4
        ranked_as(db, "ana", {"base-mean": ">", "base-self": "<", "mean-self": "="})
        ranked_as(db, "ben", {"base-mean": ">", "base-self": "<", "mean-self": "="})
        ranked_as(db, "eva", {"base-mean": ">", "base-self": "=", "mean-self": "="})
    code, out, _ = run(["judge", "report", study, "--format", "csv"], capsys)
    assert code == 0
    rows = {(r["system A"], r["system B"], r["judge"]): r for r in csv.DictReader(io.StringIO(out))}
    assert len(rows) == 3 * 4
    ana = rows[("base", "mean", "ana")]
    assert (ana["items"], ana["identical"], ana[">"], ana["="], ana["<"], ana["A > B %"]) == \
        ("2", "3", "2", "0", "0", "100.0")
    assert float(ana["sign test p"]) == pytest.approx(0.5)  # 2 of 2: 2 · 1/4
    pooled = rows[("base", "self", "all judges")]
    assert (pooled["items"], pooled["identical"], pooled[">"], pooled["="], pooled["<"]) == ("6", "3", "0", "2", "4")
    assert pooled["A < B %"] == "66.7" and pooled["A = B %"] == "33.3"
    assert float(pooled["sign test p"]) == pytest.approx(0.5)  # both items net negative
    # 3 judges agree on everything but eva's two "=" on base-self: Fleiss' κ from those counts
    counts = [[3, 0, 0]] * 2 + [[0, 1, 2]] * 2 + [[0, 3, 0]] * 4
    assert rows[("base", "mean", "all judges")]["kappa"] == "n/a (Fleiss)"  # all ">" : chance agreement 1
    code, md, _ = run(["judge", "report", study], capsys)
    assert code == 0 and "| base | self | all judges | 6 | 3 | 0.0 | 33.3 | 66.7 |" in md
    assert f"Fleiss's κ = {fleiss_kappa(counts):.3f} on 8 items" in md
    out_file = tmp_path / "report.md"
    assert run(["judge", "report", study, "-o", out_file], capsys)[0] == 0
    assert out_file.read_text(encoding="utf-8") == md


def test_report_two_judges_uses_cohen(tmp_path, capsys):
    study = create_study(tmp_path, capsys)
    with open_study(study) as db:
        ranked_as(db, "ana", {"base-mean": ">", "base-self": "<", "mean-self": "="})
        ranked_as(db, "ben", {"base-mean": ">", "base-self": "=", "mean-self": "="})
    _, md, _ = run(["judge", "report", study], capsys)
    # 8 items: ana > > < < = = = =, ben > > = = = = = =; p_o = 6/8, p_e = (2/8·2/8 + 4/8·6/8) = 0.4375
    kappa = (0.75 - 0.4375) / (1 - 0.4375)
    assert f"Cohen's κ = {kappa:.3f} on 8 items" in md
