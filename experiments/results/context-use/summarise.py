"""The context-use table over seeds (issue 53), from the committed measurements alone.

    python experiments/results/context-use/summarise.py > experiments/results/context-use/summary.md
    python experiments/results/context-use/summarise.py --page docs/context-use.md  # its table over seeds

Reads every SYSTEM/seedN directory beside this file (cxmi/, contrastive-test.json, scores.json)
and writes one row per run and one per system over its seeds.  Over seeds, the pronoun
accuracies are pooled (right answers over all seeds' examples), and each comparison is an
exact two-sided paired randomisation test on the examples: per example, how many seeds get it
right under one condition minus under the other, each example one pair whatever its seeds say.
"""
from __future__ import annotations

import csv
import gzip
import json
import statistics
import sys
from functools import cache
from pathlib import Path

import numpy as np

from ctxnmt.analysis.contrastive import read_examples, right
from ctxnmt.evaluation.replicates import smallest_detectable

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent.parent / "pronouns" / "bible-test.json"
BASELINE = "baseline"
PRONOUNS = ("he", "she", "his", "they")
CONDITIONS = ("own", "none", "other")
# a variant and the model it changes: compared seed for seed under each condition
COUNTERPARTS = {"random-context": "doc-init-both-gated-aux-paper", "concat-2to2-coword": "concat-2to2"}


def runs(system: Path) -> list[Path]:
    return sorted(system.glob("seed*"), key=lambda p: int(p.name[4:]))


@cache
def outcomes(run: Path) -> dict[str, np.ndarray]:
    """Per condition, which pronoun examples the run gets right; a sentence-level model's
    'own' stands for every condition."""
    report = json.loads((run / "contrastive-test.json").read_text())
    ok = {c: np.array([right(np.array(s)) for s in scores], dtype=bool) for c, scores in report["scores"].items()}
    return {c: ok.get(c, ok["own"]) for c in CONDITIONS}


@cache
def earlier_only() -> np.ndarray:
    """Which examples have their antecedent only in earlier verses."""
    return np.array([e.antecedent == "earlier sentences" for e in read_examples(str(EXAMPLES))])


# Where an agreeing antecedent is, in verses before the pronoun's (the set's "ante distance"):
# a model that reads one previous verse can see it only at distance 0 or 1.
DISTANCES = {"same verse": (0,), "one verse back": (1,), "two or three back": (2, 3), "none found": (None,)}


@cache
def at_distance(distances: tuple[int | None, ...]) -> np.ndarray:
    """Which examples have their nearest agreeing antecedent `distances` verses back."""
    return np.array([e["ante distance"] in distances for e in json.loads(EXAMPLES.read_text())])


FEMININE, MASCULINE = ("she", "her"), ("he", "his", "him")


@cache
def gender(pronouns: tuple[str, ...]) -> np.ndarray:
    """Which examples' right pronoun is one of `pronouns` (feminine or masculine: the choices
    that only an antecedent can settle, where the verb's number cannot)."""
    return np.array([e["ref pronoun"].lower() in pronouns for e in json.loads(EXAMPLES.read_text())])


def accuracies(outcome_runs: list[dict[str, np.ndarray]], rows: np.ndarray | slice = slice(None)) -> str:
    """Accuracy under own / none / other, pooled over the runs' answers on `rows`."""
    return " / ".join(f"{np.mean([o[c][rows] for o in outcome_runs]):.3f}" for c in CONDITIONS)


def seedwise(system: Path, other: Path, condition: str,
             rows: np.ndarray | slice = slice(None)) -> tuple[float, float, float] | None:
    """`system` against `other` on the seeds both have: pooled accuracies and the test's p."""
    seeds = [r.name for r in runs(system) if (other / r.name).is_dir()]
    if not seeds:
        return None
    mine = [outcomes(system / n)[condition][rows] for n in seeds]
    theirs = [outcomes(other / n)[condition][rows] for n in seeds]
    return float(np.mean(mine)), float(np.mean(theirs)), paired_randomisation(mine, theirs)


def cxmi(run: Path) -> dict | None:
    path = run / "cxmi" / "cxmi.json"
    return json.loads(path.read_text())["conditions"] if path.exists() else None


def pronoun_pcxmi(run: Path) -> dict[str, float]:
    """Mean P-CXMI, own against another chapter's context, of each pronoun's reference tokens."""
    path = run / "cxmi" / "tokens.tsv.gz"
    if not path.exists():
        return {}
    found: dict[str, list[float]] = {p: [] for p in PRONOUNS}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if row["token"].lower() in found:
                found[row["token"].lower()].append(float(row["pcxmi_other"]))
    return {p: statistics.fmean(v) for p, v in found.items() if v}


def bleu(run: Path) -> float:
    return json.loads((run / "scores.json").read_text())["value"]["bleu"]


def paired_randomisation(first: list[np.ndarray], second: list[np.ndarray]) -> float:
    """Exact two-sided paired randomisation test on the examples' seed-summed differences d:
    under the null each d is as likely to have either sign, so the distribution of their sum
    is the convolution of the examples' two-point laws {-|d|, +|d|}.  On one seed it is
    McNemar's exact test."""
    d = np.sum(first, axis=0).astype(int) - np.sum(second, axis=0).astype(int)
    law = np.array([1.0])  # probabilities of the sums -reach ... +reach
    for m in np.abs(d[d != 0]):
        law = 0.5 * (np.concatenate([law, np.zeros(2 * m)]) + np.concatenate([np.zeros(2 * m), law]))
    reach = (len(law) - 1) // 2
    sums = np.arange(-reach, reach + 1)
    return float(min(1.0, law[np.abs(sums) >= abs(int(d.sum()))].sum()))


def _cx(c: dict | None, condition: str) -> str:
    if c is None:
        return "0 by construction"
    row = c[condition]
    return f"{row['cxmi']:+.4f} [{row['interval'][0]:+.4f}, {row['interval'][1]:+.4f}]"


def per_run_table(systems: list[Path]) -> list[str]:
    lines = ["| system | seed | test BLEU | CXMI own − other (95% interval) | CXMI own − none | pronouns own / none / other "
             "| earlier-verse antecedents own / none / other | feminine own / none / other | masculine own / none / other "
             "| pronoun P-CXMI " + " / ".join(PRONOUNS) + " |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for system in systems:
        for run in runs(system):
            acc, ea = accuracies([outcomes(run)]), accuracies([outcomes(run)], earlier_only())
            fem, masc = (accuracies([outcomes(run)], gender(g)) for g in (FEMININE, MASCULINE))
            p = pronoun_pcxmi(run)
            pc = " / ".join(f"{p[w]:+.2f}" for w in PRONOUNS) if p else "0 by construction"
            c = cxmi(run)
            lines.append(f"| {system.name} | {run.name[4:]} | {bleu(run):.2f} | {_cx(c, 'other')} | {_cx(c, 'none')} "
                         f"| {acc} | {ea} | {fem} | {masc} | {pc} |")
    return lines


def _mean_sd(values: list[float], fmt: str, interval: bool = False) -> str:
    """Mean ± standard deviation over seeds (one seed: its value); with interval, the mean's 95% t interval too."""
    mean = statistics.fmean(values)
    if len(values) == 1:
        return format(mean, fmt)
    sd = statistics.stdev(values)
    text = f"{format(mean, fmt)} ± {format(sd, fmt.lstrip('+'))}"
    if interval:
        half = smallest_detectable(sd, len(values))  # the mean's 95% t interval's half-width
        text += f" [{format(mean - half, fmt)}, {format(mean + half, fmt)}]"
    return text


def over_seeds_table(systems: list[Path]) -> list[str]:
    lines = ["| system | seeds | test BLEU | CXMI own − other | seeds whose interval is above 0 | CXMI own − none "
             "| pronouns own / none / other (pooled) | earlier-verse antecedents (pooled) | feminine (pooled) | masculine (pooled) "
             "| pronoun P-CXMI " + " / ".join(PRONOUNS) + " (mean over seeds) "
             "| p: own vs none, own vs other | own vs the baseline (same seeds) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for system in systems:
        seeds = runs(system)
        ok = [outcomes(r) for r in seeds]
        pooled, pooled_earlier = accuracies(ok), accuracies(ok, earlier_only())
        fem, masc = (accuracies(ok, gender(g)) for g in (FEMININE, MASCULINE))
        cx = [cxmi(r) for r in seeds]
        if all(c is not None for c in cx):
            other = _mean_sd([c["other"]["cxmi"] for c in cx], "+.4f", interval=True)
            none = _mean_sd([c["none"]["cxmi"] for c in cx], "+.4f", interval=True)
            above = f"{sum(c['other']['interval'][0] > 0 for c in cx)} of {len(cx)}"
            tests = (f"{paired_randomisation([o['own'] for o in ok], [o['none'] for o in ok]):.3f}, "
                     f"{paired_randomisation([o['own'] for o in ok], [o['other'] for o in ok]):.3f}")
        else:
            other = none = "0 by construction"
            above, tests = "", ""
        against = seedwise(system, HERE / BASELINE, "own") if system.name != BASELINE else None
        versus = f"{against[0]:.3f} against {against[1]:.3f}, p = {against[2]:.3f}" if against else ""
        lines.append(f"| {system.name} | {', '.join(r.name[4:] for r in seeds)} "
                     f"| {_mean_sd([bleu(r) for r in seeds], '.2f')} | {other} | {above} | {none} | {pooled} | {pooled_earlier} "
                     f"| {fem} | {masc} | {seed_pcxmi(seeds)} "
                     f"| {tests} | {versus} |")
    return lines


def distance_table(systems: list[Path]) -> list[str]:
    one_back = at_distance(DISTANCES["one verse back"])
    lines = ["| system | seeds | " + " | ".join(f"{name} ({int(at_distance(d).sum())})" for name, d in DISTANCES.items())
             + " | one verse back, p: own vs none, own vs other | one verse back, own vs the baseline (same seeds) |",
             "|---|---|" + "---|" * (len(DISTANCES) + 2)]
    for system in systems:
        seeds = runs(system)
        ok = [outcomes(r) for r in seeds]
        cells = [accuracies(ok, at_distance(d)) for d in DISTANCES.values()]
        tests = versus = ""
        if cxmi(seeds[0]) is not None:  # a document model: its conditions differ
            tests = ", ".join(f"{paired_randomisation([o['own'][one_back] for o in ok], [o[c][one_back] for o in ok]):.3f}"
                              for c in ("none", "other"))
        against = seedwise(system, HERE / BASELINE, "own", one_back) if system.name != BASELINE else None
        if against:
            versus = f"{against[0]:.3f} against {against[1]:.3f}, p = {against[2]:.3f}"
        lines.append(f"| {system.name} | {', '.join(r.name[4:] for r in seeds)} | {' | '.join(cells)} | {tests} | {versus} |")
    return lines


def seed_pcxmi(seeds: list[Path]) -> str:
    """Each pronoun's P-CXMI (own against other) averaged over the seeds' means."""
    found = [pronoun_pcxmi(r) for r in seeds]
    if not all(found):
        return "0 by construction"
    return " / ".join(f"{statistics.fmean(f[w] for f in found):+.2f}" for w in PRONOUNS)


def counterpart_table(systems: list[Path]) -> list[str]:
    lines = ["| system | against | seeds | pronouns own, none, other: system against counterpart (p) |", "|---|---|---|---|"]
    for system in systems:
        if system.name not in COUNTERPARTS:
            continue
        other = HERE / COUNTERPARTS[system.name]
        seeds = [r.name for r in runs(system) if (other / r.name).is_dir()]
        cells = ", ".join("{:.3f} against {:.3f} ({:.3f})".format(*seedwise(system, other, c)) for c in CONDITIONS)
        lines.append(f"| {system.name} | {other.name} | {', '.join(n[4:] for n in seeds)} | {cells} |")
    return lines


BEGIN = "<!-- begin table: python experiments/results/context-use/summarise.py --page docs/context-use.md -->"
END = "<!-- end table -->"


def all_systems() -> list[Path]:
    systems = sorted(p for p in HERE.iterdir() if p.is_dir() and runs(p))
    systems.sort(key=lambda p: p.name != BASELINE)
    return systems


def page_block() -> str:
    """What a page holds between BEGIN and END: the table over seeds."""
    return "\n".join([BEGIN, *over_seeds_table(all_systems()), END])


def update_page(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SystemExit(f"{page}: needs one line '{BEGIN}' and one '{END}' around the table")
    head, rest = text.split(BEGIN)
    page.write_text(head + page_block() + rest.split(END, 1)[1], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--page"] and len(argv) == 2:
        update_page(Path(argv[1]))
        return 0
    if argv:
        raise SystemExit("usage: summarise.py [--page PAGE.md]")
    systems = all_systems()
    out = ["# Context use over seeds", "",
           "Written by `python experiments/results/context-use/summarise.py` from the directories beside it.", "",
           "## Each run", ""] + per_run_table(systems) + [
           "", "## Over seeds", "",
           "Mean ± standard deviation over seeds, with the mean's 95% t interval over seeds for CXMI; pronoun accuracies pooled over the seeds' examples; p from an exact "
           "two-sided paired randomisation test on each example's seed-summed difference in right answers.", ""] + over_seeds_table(systems) + [
           "", "## By where the antecedent is", "",
           "Pronoun accuracy own / none / other, pooled over seeds, by how many verses before the pronoun's its nearest "
           "agreeing antecedent is (examples in brackets; the set's tag, right for about two thirds of a hand-checked "
           "sample: experiments/pronouns/README.md).  A model that reads one previous verse sees the antecedent only "
           "in the first two columns.", ""] + distance_table(systems) + [
           "", "## Against the model a variant changes", ""] + counterpart_table(systems)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
