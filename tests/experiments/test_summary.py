"""`python -m ctxnmt.experiments.summary`: the results page's first table, from the reports."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxnmt.evaluation.replicates import seed_t_power, smallest_detectable
from ctxnmt.experiments import summary
from ctxnmt.experiments.summary import Claim, Result, powers, verdict

ROOT = Path(__file__).resolve().parents[2]
VERDICTS = {"reproduces", "does not reproduce", "same direction, not significant"}


def result(delta: float, p: float, sd: float | None = 0.4, seeds: int = 5,
           higher_is_better: bool = True, baseline: float = 35.0) -> Result:
    """A row whose seeds' differences spread by sd (None: one seed)."""
    detectable = smallest_detectable(sd, seeds) if sd is not None else None
    return Result(seeds, delta, [delta] * seeds, p, p if seeds > 1 else None, detectable, higher_is_better, baseline,
                  sd)


@pytest.mark.parametrize("gains, res, expected", [
    (("+0.1", "−0.1"), result(+0.16, 0.25, None, seeds=1), "reproduces"),  # the paper found no difference
    (("+0.1", "−0.1"), result(+0.9, 0.01), "does not reproduce"),
    (("+0.9", "+1.4"), result(-0.47, 0.19), "does not reproduce"),  # the other sign
    (("+3.83",), result(+2.15, 0.002), "reproduces"),
    (("+2.03", "+1.70"), result(+0.02, 0.93, sd=0.50), "does not reproduce"),  # power > 0.99 at +1.70
    (("+1.49", "+0.92"), result(+0.36, 0.40, sd=0.85), "same direction, not significant"),  # power 0.45 at +0.92
    # the gain is above the 95% half-width (0.90) but the t-test would catch it only 63% of the time
    (("+1.0",), result(+0.2, 0.5, sd=0.725), "same direction, not significant"),
    (("−0.94",), result(-0.61, 0.069, None, seeds=1), "same direction, not significant"),
])
def test_the_verdict_rule(gains, res, expected):
    assert verdict(Claim("x", "x", gains), res) == expected


def test_the_power_is_the_t_test_s_at_each_of_the_paper_s_gains():
    # the figures: adaptive both at +0.92 about 0.45, mean residual at +1.0 about 0.99
    assert powers(Claim("x", "x", ("+1.49", "+0.92")), result(+0.36, 0.40, sd=0.853)) == \
        [pytest.approx(0.83, abs=0.01), pytest.approx(0.45, abs=0.01)]
    assert powers(Claim("x", "x", ("+0.3", "+1.0")), result(-0.26, 0.18, sd=0.354))[1] == pytest.approx(0.99, abs=0.01)
    assert powers(Claim("x", "x", ("+0.1", "−0.1")), result(0.1, 0.5)) is None  # no gain claimed
    assert powers(Claim("x", "x", ("−0.94",)), result(-0.61, 0.07, None, seeds=1)) is None


def test_a_language_model_s_gain_is_scaled_to_our_baseline():
    # −3.6 on the paper's 88.7 is −1.27 on a baseline of 31.2: three seeds this far apart would catch it
    # about one time in five, where the unscaled −3.6 would have shown
    res = result(-0.84, 0.32, sd=0.9, seeds=3, higher_is_better=False, baseline=31.2)
    assert seed_t_power(3.6 * 31.2 / 88.7, 0.9, 3) < 0.3 < 0.8 < seed_t_power(3.6, 0.9, 3)
    assert verdict(Claim("lm", "lm", ("−3.6",), paper_baseline=88.7), res) == "same direction, not significant"
    assert verdict(Claim("lm", "lm", ("−3.6",)), res) == "does not reproduce"


def test_the_table_has_a_row_per_claim_with_a_verdict_from_the_rule():
    text = summary.markdown(ROOT).split("\nBeyond the papers")[0]  # the paper-named systems' table
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == len(summary.CLAIMS)
    for claim, row in zip(summary.CLAIMS, rows):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert f"(`{claim.system}`)" in cells[0]
        assert cells[-1].split(" (")[0] in VERDICTS


def test_update_rewrites_only_between_the_markers(tmp_path):
    page = tmp_path / "results.md"
    page.write_text(f"# Results\n\nbefore\n\n{summary.BEGIN}\nold table\n{summary.END}\n\nafter\n", encoding="utf-8")
    assert summary.update(page, "new table") is True
    assert page.read_text(encoding="utf-8") == \
        f"# Results\n\nbefore\n\n{summary.BEGIN}\nnew table\n{summary.END}\n\nafter\n"
    assert summary.update(page, "new table") is False
    assert summary.block(page.read_text(encoding="utf-8")) == "new table"


def test_a_page_without_markers_is_refused(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("# Results\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="lacks the markers"):
        summary.update(page, "table")
