"""The first table of docs/results.md, written from the committed reports.

    python -m ctxnmt.experiments.summary                              # print it
    python -m ctxnmt.experiments.summary --update docs/results.md     # rewrite it in the page

Every number in a row comes from a report: experiments/results/reproduction/report.json for
translation, experiments/results/lm/report.json for the language models, and
experiments/results/document-models/report.json for the rows beyond the papers.  This module adds
only what no report holds: the gain each paper reported, and the row's label.  The verdict
follows from those numbers by one rule (`verdict`), which the table's notes state.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ctxnmt.evaluation.replicates import seed_t_power

REPORTS = {"translation": Path("experiments/results/reproduction/report.json"),
           "lm": Path("experiments/results/lm/report.json"),
           "documents": Path("experiments/results/document-models/report.json")}
LM_BASELINE = "lm-lstm"
BEGIN = "<!-- begin summary: python -m ctxnmt.experiments.summary --update docs/results.md -->"
END = "<!-- end summary -->"
ALPHA = 0.05
POWER = 0.8  # the conventional power below which a missing gain is not evidence against it


@dataclass(frozen=True)
class Claim:
    """One row: a system of a report, and what its paper reported for it."""

    system: str  # the report's name for it
    label: str
    paper: tuple[str, ...]  # the paper's gains over its baseline, as printed, one per test set
    paper_baseline: float | None = None  # LMs: the paper's baseline perplexity, to scale its gain to ours
    note: str = ""  # a footnote; `{bleu[SYSTEM]}` is a system's mean test sacreBLEU in the translation report


CLAIMS = (
    Claim("self-attentive-residual", "self-attentive residual, eq. 10", ("+0.9", "+1.4")),
    Claim("mean-residual-paper", "mean residual, eq. 9", ("+0.3", "+1.0")),
    Claim("memory-rnn", "memory-RNN, eqs. 15 and 17", ("+0.1", "−0.1")),
    Claim("adaptive-both-paper", "adaptive both, eqs. 13–21", ("+1.49", "+0.92")),
    Claim("doc-init-both-gated-aux-paper",
          "cross-sentence, init both + gated aux, as the released code reads the history", ("+2.10",)),
    Claim("doc-init-both-gated-aux",
          "cross-sentence, init both + gated aux, the history read through the source embeddings", ("+2.10",)),
    Claim("bcae", "BCAEncoder", ("+2.03", "+1.70")),
    Claim("stacked-birnn", "stacked bi-RNN encoder", ("−0.94",)),
    Claim("baseline+bcae", "ensemble RNNSearch + BCAE", ("+3.83",),
          note="the gain is ensembling's: two baselines decoded together (seeds 1 + 2, `baseline-seeds-1+2` "
               "in the same report) score {bleu[baseline-seeds-1+2]:.2f}"),
    Claim("lm-self-attentive", "LM, self-attentive residual, eqs. 12–13", ("−3.6",), paper_baseline=88.7),
    Claim("lm-mean", "LM, mean residual, eq. 11", ("−1.6",), paper_baseline=88.7),
    Claim("mean-residual", "*ours:* mean residual counting the start slot", ("+0.3", "+1.0")),
    Claim("adaptive-both", "*ours:* adaptive both, balanced hyper-gate, output gain 3", ("+1.49", "+0.92")),
)

RULE = (
    "Verdict, from the row's numbers: where the paper's gains differ in sign (it found no "
    "difference), *reproduces* if ours is not significant either.  Otherwise *does not reproduce* "
    "if our Δ has the other sign; *reproduces* if it has the paper's sign and is significant "
    f"(p < {ALPHA} by the t-test over seeds, or for one seed by two-sided paired approximate "
    "randomisation); *does not reproduce* if it is not significant although the t-test over seeds "
    f"had power {POWER} or more at the paper's smallest gain (a gain of the paper's size would have "
    f"shown at least {POWER:.0%} of the time); else *same direction, not significant*.  Power: the "
    "chance that t-test calls a true mean gain of the paper's size significant, from the noncentral "
    "t distribution with the seeds' observed spread; 95% half-width: the smallest mean Δ it "
    "calls significant, which a true gain of that size reaches only a little over half the time.  The LMs' "
    "gains are scaled to our baseline's perplexity first (the paper's baseline is 88.7 on the Penn "
    "Treebank)."
)


@dataclass(frozen=True)
class Result:
    """A system against the same seeds' baseline, as its report gives it."""

    seeds: int
    delta: float  # over all seeds (translation: pooled outputs; LM: mean of the seed differences)
    deltas: list[float]  # each seed's difference
    p_pooled: float  # stratified approximate randomisation over the seeds, or one seed's paired test
    p_seeds: float | None  # the t-test with the seeds' differences as the sample
    detectable: float | None  # the smallest mean Δ that t-test would call significant: its 95% half-width
    higher_is_better: bool
    baseline: float | None  # the baseline's mean score (pooled over seeds; for the LMs' scaling)
    sd: float | None = None  # the spread of the seeds' differences, for the t-test's power


def translation_rows(root: Path) -> list[dict]:
    return json.loads((root / REPORTS["translation"]).read_text(encoding="utf-8"))["rows"]


def load_results(root: Path = Path(".")) -> dict[str, Result]:
    """Every system of both reports, by its report name."""
    results = {}
    for row in translation_rows(root):
        sig = row["significance"]
        if not sig:
            continue
        baseline = sig.get("over_seeds", {}).get("baseline")
        if len(row["seeds"]) > 1:
            pooled, t = sig["over_seeds"], sig["seeds_t"]
            results[row["system"]] = Result(len(row["seeds"]), pooled["delta"], sig["deltas"], pooled["p_value"],
                                            t["p_value"], t.get("detectable"), True, baseline, t["sd"])
        else:
            results[row["system"]] = Result(1, sig["deltas"][0], sig["deltas"][:1], sig["p_values"][0],
                                            None, None, True, baseline)
    lm_rows = json.loads((root / REPORTS["lm"]).read_text(encoding="utf-8"))["rows"]
    lm_baseline = next(r["mean"] for r in lm_rows if r["system"] == LM_BASELINE)
    for row in lm_rows:
        if "delta_mean" not in row:
            continue
        t = row["t_over_seeds"]
        results[row["system"]] = Result(len(row["paired_seeds"]), row["delta_mean"], row["delta"],
                                        row["p_over_seeds"], t["p_value"], t["detectable"], False, lm_baseline,
                                        t["sd"])
    return results


def number(text: str) -> float:
    return float(text.replace("−", "-"))


def verdict(claim: Claim, result: Result) -> str:
    gains = [number(g) for g in claim.paper]
    p = result.p_seeds if result.p_seeds is not None else result.p_pooled
    if min(gains) < 0 < max(gains):
        return "reproduces" if p >= ALPHA else "does not reproduce"
    if (result.delta > 0) != (gains[0] > 0):
        return "does not reproduce"
    if p < ALPHA:
        return "reproduces"
    if min(powers(claim, result) or [0.0]) >= POWER:
        return "does not reproduce"
    return "same direction, not significant"


def powers(claim: Claim, result: Result) -> list[float] | None:
    """The t-test over seeds' power at each of the paper's gains (scaled to our baseline for the
    LMs); None for one seed, and where the paper's gains differ in sign (it claimed no gain)."""
    gains = [number(g) for g in claim.paper]
    if result.sd is None or min(gains) < 0 < max(gains):
        return None
    scale = result.baseline / claim.paper_baseline if claim.paper_baseline else 1.0
    return [seed_t_power(g * scale, result.sd, result.seeds) for g in gains]


def signed(x: float) -> str:
    return f"{x:+.2f}".replace("-", "−")


def power_text(power: float) -> str:
    return "> 0.99" if power >= 0.995 else f"{power:.2f}"  # 1.00 would read as certainty


def p_text(p: float, worse: bool) -> str:
    text = "< 0.001" if p < 0.001 else f"{p:.3f}"
    return f"{text} (worse)" if worse and p < ALPHA else text


def cells(claim: Claim, result: Result, note_mark: str = "") -> list[str]:
    unit = " ppl" if not result.higher_is_better else ""
    worse = (result.delta < 0) == result.higher_is_better
    p = p_text(result.p_pooled, worse)
    if result.p_seeds is not None:
        p += " / " + p_text(result.p_seeds, worse)
    better = sum((d > 0) == result.higher_is_better for d in result.deltas)
    power = powers(claim, result)
    return [f"{claim.label} (`{claim.system}`)", " / ".join(g + unit for g in claim.paper), str(result.seeds),
            signed(result.delta) + unit, p, "–" if result.detectable is None else f"{result.detectable:.2f}",
            "–" if power is None else " / ".join(map(power_text, power)),
            f"{better} of {len(result.deltas)}", verdict(claim, result) + note_mark]


HEADER = ("system (form)", "paper's gain", "seeds", "Δ", "p: stratified / over seeds", "95% half-width",
          "power at the paper's gain", "seeds better", "verdict")


def markdown(root: Path = Path(".")) -> str:
    """The table, its notes and the verdict rule, as the page holds them between its markers."""
    results = load_results(root)
    bleu = {row["system"]: row["mean"]["bleu"] for row in translation_rows(root)}
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    notes = []
    for claim in CLAIMS:
        if claim.system not in results:
            raise SystemExit(f"summary: {claim.system} is in no committed report ({', '.join(map(str, REPORTS.values()))})")
        mark = ""
        if claim.note:
            notes.append(claim.note.format(bleu=bleu))
            mark = f" ({len(notes)})"
        lines.append("| " + " | ".join(cells(claim, results[claim.system], mark)) + " |")
    lines += [""] + [f"({i}) {note}." for i, note in enumerate(notes, 1)] + ["", RULE, "", beyond_the_papers(root)]
    return "\n".join(lines)


# Rows beyond the papers: the document models of experiments/document-models.yaml (issue 62), by
# their report names; a system not yet in the report is not listed.
BEYOND = (("concat-2to1", "concatenation 2-to-1 (Tiedemann & Scherrer 2017)"),
          ("concat-2to2", "concatenation 2-to-2 (Tiedemann & Scherrer 2017)"),
          ("hierarchical-target", "cross-sentence with a target-side summary (s-hier-to-2, Bawden et al. 2018)"),
          ("concat-2to2-coword", "concatenation 2-to-2 with CoWord dropout 0.1 (Fernandes et al. 2021)"))
BEYOND_HEADER = ("document model", "seeds", "test sacreBLEU", "Δ", "p: stratified / over seeds", "seeds better")


def beyond_the_papers(root: Path) -> str:
    """The document models' BLEU against the same seeds' baseline, from their report."""
    rows = {row["system"]: row for row in
            json.loads((root / REPORTS["documents"]).read_text(encoding="utf-8"))["rows"]}
    lines = ["Beyond the papers: the document models of issue 62 (`experiments/results/document-models/report.json`), "
             "against the same seeds' baseline; whether they read their context where translation needs it is "
             "[context-use.md](context-use.md#the-document-models-over-seeds)'s table.", "",
             "| " + " | ".join(BEYOND_HEADER) + " |", "|" + "---|" * len(BEYOND_HEADER)]
    for system, label in BEYOND:
        if system not in rows or not rows[system]["significance"]:
            continue
        row, sig = rows[system], rows[system]["significance"]
        over = sig.get("over_seeds")
        delta = over["delta"] if over else sig["deltas"][0]
        p = (f"{p_text(over['p_value'], False)} / {p_text(sig['seeds_t']['p_value'], False)}" if over
             else p_text(sig["p_values"][0], False))
        better = sum(d > 0 for d in sig["deltas"])
        lines.append(f"| {label} (`{system}`) | {len(row['seeds'])} | {row['mean']['bleu']:.2f} | {signed(delta)} "
                     f"| {p} | {better} of {len(sig['deltas'])} |")
    return "\n".join(lines)


def update(page: Path, text: str) -> bool:
    """Put `text` between the page's markers; True where that changed the page."""
    old = page.read_text(encoding="utf-8")
    if BEGIN not in old or END not in old:
        raise SystemExit(f"summary: {page} lacks the markers {BEGIN} … {END}")
    head, rest = old.split(BEGIN, 1)
    new = head + BEGIN + "\n" + text + "\n" + END + rest.split(END, 1)[1]
    if new != old:
        page.write_text(new, encoding="utf-8")
    return new != old


def block(page_text: str) -> str:
    """What the page holds between its markers."""
    return page_text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctxnmt.experiments.summary", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: here)")
    parser.add_argument("--update", type=Path, metavar="PAGE", help="rewrite the table between PAGE's markers")
    args = parser.parse_args(argv)
    text = markdown(args.root)
    if args.update:
        print(f"{args.update}: {'updated' if update(args.update, text) else 'already up to date'}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
