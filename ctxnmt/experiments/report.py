"""The experiment report: a table like the papers', per-seed details and the commands behind each row.

With several seeds every number is the mean over seeds, followed by the sample
standard deviation.  A system is marked significant only if every seed pair
(system seed s against baseline seed s) agrees on the direction and is below the
threshold, i.e. the mark reflects the largest p-value.
"""
from __future__ import annotations

import csv
import io
import json
import shlex
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctxnmt.evaluation.metrics import HIGHER_IS_BETTER, Bucket, format_length_buckets, plot_length_buckets
from ctxnmt.evaluation.replicates import seed_t_test
from ctxnmt.evaluation.significance import DEFAULT_SAMPLES, DESCRIPTIONS
from ctxnmt.experiments.evaluate import SCORE_KEYS, Output, TestSet
from ctxnmt.experiments.spec import Experiment
from ctxnmt.utils.io import atomic_write, make_directory

# (key, header, decimals) of the table's columns after the system name, in the papers' order;
# the significance column has no decimals: it holds marks, not a number.
SIGNIFICANCE = "significance"
OVER_SEEDS = "over_seeds"
SEEDS_T = "seeds_t"
SEEDS = "seeds"
DETECTABLE = "detectable"
TABLE = (
    (SEEDS, "seeds", None),
    ("parameters", "parameters", 0),
    ("dev_bleu", "dev BLEU", 2),
    ("last_quarter_gain", "dev gain, last ¼", 2),
    ("bleu_tok", "test BLEU (tokenised)", 2),
    ("bleu", "test sacreBLEU", 2),
    ("chrf", "chrF", 2),
    ("ter", "TER", 2),
    (SIGNIFICANCE, "sig.", None),
    (OVER_SEEDS, "all seeds: Δ, p", None),
    (SEEDS_T, "t-test over seeds: t, p", None),
    (DETECTABLE, "smallest detectable Δ", None),
    ("train_tokens_per_s", "train tok/s", 0),
    ("sentences_per_s", "decode sent/s", 1),
    ("train_minutes", "train min", 2),
)
COLUMNS = tuple(column for column in TABLE if column[2] is not None)  # the numeric ones
THRESHOLDS = ((0.01, "**"), (0.05, "*"))


@dataclass
class Row:
    system: str
    external: bool
    seeds: list[int | None]
    values: dict[str, list[float]]
    significance: dict[str, Any] | None = None
    commands: list[str] = field(default_factory=list)

    def mean(self, key: str) -> float | None:
        values = self.values.get(key) or []
        return statistics.fmean(values) if values else None

    def sd(self, key: str) -> float | None:
        values = self.values.get(key) or []
        return statistics.stdev(values) if len(values) > 1 else None


def output_values(output: Output) -> dict[str, float]:
    values = {k: output.scores[k] for k in SCORE_KEYS}
    if output.decode:
        values["parameters"] = output.decode["parameters"]
        values["sentences_per_s"] = output.decode["sentences_per_s"]
    if output.training:
        for key in ("dev_bleu", "last_quarter_gain", "train_tokens_per_s", "train_minutes"):
            if output.training.get(key) is not None:
                values[key] = output.training[key]
    return values


def make_row(system: str, external: bool, outputs: list[Output], commands: list[str],
             significance: dict[str, Any] | None) -> Row:
    values: dict[str, list[float]] = {}
    for output in outputs:
        for key, value in output_values(output).items():
            values.setdefault(key, []).append(float(value))
    return Row(system, external, [o.seed for o in outputs], values, significance, commands)


def summarise_tests(tests: list[dict[str, Any]], metric: str,
                    over_seeds: dict[str, Any] | None = None) -> dict[str, Any]:
    """One mark for all seed pairs of a system: the weakest pair decides.  `over_seeds`, the
    stratified test over every seed pair (replicate_tests), is kept beside it, and so is the
    t-test with the same seed pairs' differences as its sample (`seeds_t`)."""
    higher = HIGHER_IS_BETTER[metric]
    improvements = [t["delta"] if higher else -t["delta"] for t in tests]
    max_p = max(t["p_value"] for t in tests)
    direction = "better" if all(d > 0 for d in improvements) else "worse" if all(d < 0 for d in improvements) else ""
    marks = next((m for threshold, m in THRESHOLDS if max_p < threshold), "") if direction else ""
    summary = {"test": tests[0]["test"], "metric": tests[0]["metric"], "max_p": max_p, "direction": direction,
               "marks": marks, "p_values": [t["p_value"] for t in tests], "deltas": [t["delta"] for t in tests]}
    if over_seeds is not None:  # a trained system with two seed pairs or more
        summary["over_seeds"] = over_seeds
        summary["seeds_t"] = seed_t_test(summary["deltas"])
    return summary


def over_seeds_cell(row: Row) -> str:
    """The stratified AR p-value over all seed pairs, with its sign: '+0.84, p=0.012'."""
    test = (row.significance or {}).get("over_seeds")
    if test is None:
        return "–"
    return f"{test['delta']:+.2f}, {_p_text(test['p_value'])}"


def _p_text(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"  # 10,000 trials reach 0.0001: never round to 0


def seeds_t_cell(row: Row) -> str:
    """The t-test over seed pairs: 't=1.48, p=0.277'; 'no spread' when every pair differs alike."""
    test = (row.significance or {}).get("seeds_t")
    if test is None:
        return "–"
    t = "no spread" if test["t"] is None else f"t={test['t']:.2f}"
    return f"{t}, {_p_text(test['p_value'])}"


def detectable_cell(row: Row) -> str:
    """The smallest mean Δ the t-test over this row's seed pairs would call significant."""
    test = (row.significance or {}).get("seeds_t")
    if test is None or test.get("detectable") is None:
        return "–"
    return f"{test['detectable']:.2f}"


def significance_cell(row: Row) -> str:
    sig = row.significance
    if sig is None:
        return "–"
    marks = sig["marks"]
    text = (marks if sig["direction"] == "better" else f"worse {marks}") if marks else "n.s." + _unmarked_why(sig)
    return f"{text} ({_p_text(sig['max_p'])})"


def _unmarked_why(sig: dict[str, Any]) -> str:
    # with every p below the threshold, "n.s." alone would read as a contradiction
    if sig["direction"] or not any(sig["deltas"]):
        return ""
    return ", seed pairs differ in sign"


def describe_test(spec) -> str:
    """The per-seed test as the report names it: which test, and its resamples and seed."""
    samples = spec.samples or DEFAULT_SAMPLES.get(spec.test)
    unit = {"bootstrap": "resamples", "ar": "trials"}.get(spec.test)
    return DESCRIPTIONS[spec.test] + (f", {samples:,} {unit}, seed {spec.seed}" if unit else "")


def format_number(mean: float | None, sd: float | None, decimals: int) -> str:
    if mean is None:
        return "–"
    text = f"{mean:,.{decimals}f}"
    return f"{text} ± {sd:,.{decimals}f}" if sd is not None else text


def table_cells(row: Row, baseline: str) -> list[str]:
    tests = {SIGNIFICANCE: significance_cell, OVER_SEEDS: over_seeds_cell, SEEDS_T: seeds_t_cell,
             DETECTABLE: detectable_cell}  # against the baseline: its own row names itself once
    cells = [row.system + (" (external)" if row.external else "")]
    for key, _, decimals in TABLE:
        if key in tests:
            cells.append(("baseline" if key == SIGNIFICANCE else "") if row.system == baseline else tests[key](row))
        elif key == SEEDS:
            cells.append(str(len(row.seeds)) if row.seeds != [None] else "–")
        else:
            cells.append(format_number(row.mean(key), row.sd(key), decimals))
    return cells


def headers() -> list[str]:
    return ["system"] + [header for _, header, _ in TABLE]


def markdown_table(rows: list[Row], baseline: str) -> str:
    head = headers()
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(table_cells(row, baseline)) + " |" for row in rows]
    return "\n".join(lines)


# -- reproduction commands ---------------------------------------------------------------

def command(*args: Any) -> str:
    return " ".join(shlex.quote(str(a)) for a in args)


def train_command(config_path: str, overrides: list[str], program: tuple[str, ...] = ("ctxnmt", "train")) -> str:
    return command(*program, config_path, *[part for item in overrides for part in ("--set", item)])


def translate_command(model_dir: Path | list[Path], test: TestSet, hyp: Path, doc_ids: Path | None = None) -> str:
    dirs = model_dir if isinstance(model_dir, list) else [model_dir]
    return command("ctxnmt", "translate", *dirs, "-i", test.src_path, "-o", hyp,
                   *(["--doc-ids", doc_ids] if doc_ids else []))


def score_command(hyp: Path, test: TestSet) -> str:
    return command("ctxnmt", "score", "--hyp", hyp, "--ref", test.ref_path, "--lang", test.lang)


def significance_command(baseline_hyp: Path, system_hyp: Path, test: TestSet, experiment: Experiment) -> str:
    spec = experiment.significance
    samples = ["--samples", spec.samples] if spec.samples else []
    return command("ctxnmt", "score", "--hyp", baseline_hyp, "--hyp", system_hyp, "--ref", test.ref_path,
                   "--lang", test.lang, "--metrics", spec.metric, "--significance", spec.test, *samples,
                   "--seed", spec.seed)


# -- writing ------------------------------------------------------------------------------

def write_report(experiment: Experiment, test: TestSet, rows: list[Row], runs: list[dict[str, Any]],
                 buckets: dict[str, list[Bucket]], signatures: list[str], not_reported: list[str],
                 files: dict[str, list[str]]) -> dict[str, Path]:
    """report.md, report.csv, report.json and length-buckets.png in the experiment directory;
    `not_reported` names the runs and ensembles of the experiment that the report lacks, and why;
    `files`, what the report was computed from (runs, external, significance: paths relative
    to the experiment directory), is what an export copies."""
    root = experiment.root
    make_directory(root)
    paths = {"md": root / "report.md", "csv": root / "report.csv", "json": root / "report.json",
             "plot": root / "length-buckets.png"}
    with atomic_write(paths["plot"], "wb") as fh:
        plot_length_buckets(buckets, fh)
    _write_text(paths["md"], markdown_report(experiment, test, rows, buckets, signatures, paths["plot"].name, runs,
                                             not_reported))
    _write_text(paths["csv"], csv_report(rows, experiment.baseline))
    _write_text(paths["json"], json.dumps(json_report(experiment, test, rows, runs, buckets, not_reported, files),
                                          indent=1,
                                          ensure_ascii=False) + "\n")
    return paths


def _write_text(path: Path, text: str) -> None:
    with atomic_write(path, "w") as fh:
        fh.write(text)


def markdown_report(experiment: Experiment, test: TestSet, rows: list[Row], buckets: dict[str, list[Bucket]],
                    signatures: list[str], plot_name: str, runs: list[dict[str, Any]], not_reported: list[str]) -> str:
    spec = experiment.significance
    seeds = experiment.run_seeds
    parts = [
        f"# Experiment {experiment.name}",
        "",
        f"Budget: {experiment.budget.describe()} per system and seed; seeds {', '.join(map(str, seeds))}"
        + (" (numbers are mean ± sample standard deviation over seeds)" if len(seeds) > 1 else "") + ".",
        f"Test set: `{test.src_path}` → `{test.ref_path}` ({len(test.refs)} sentences).",
        "",
        markdown_table(rows, experiment.baseline),
        "",
        *([f"Not in this report: {'; '.join(not_reported)}.", ""] if not_reported else []),
        f"- sig.: {describe_test(spec)} on test-set {spec.metric} against `{experiment.baseline}`"
        + (", for every seed pair; the largest p-value is shown" if len(seeds) > 1 else "")
        + ": `*` p < 0.05, `**` p < 0.01 (`worse` if the system is the worse one), n.s. otherwise"
        + (" (also where the seed pairs differ in sign)" if len(seeds) > 1 else "") + ".",
        "- all seeds: Δ, p: for a system with two or more of the baseline's seeds, its test-set "
        f"{spec.metric} on all its seeds' outputs together minus the baseline's, and the p-value of "
        "approximate randomisation stratified over the seed pairs (Clark et al. 2011, as MultEval).",
        f"- t-test over seeds: t, p: the same seed pairs' {spec.metric} differences (the sig. test's Δ) as "
        "the sample of a two-sided one-sample t-test (n − 1 degrees of freedom).  The stratified test "
        "resamples sentences within the seed pairs; this one asks whether the seeds agree.",
        "- smallest detectable Δ: the half-width of that t-test's 95% interval at this row's spread of "
        "per-seed differences, t(0.975, n − 1) · sd / √n: the smallest mean difference it would call "
        "significant (p < 0.05).  Not its power: a true difference of that size is called significant "
        "only a little over half the time (`ctxnmt.evaluation.replicates.seed_t_power`).",
        "- dev gain, last ¼: how much the best dev BLEU so far rose over the last quarter of each run's "
        "updates (mean over seeds); a large value says the run was still learning when it stopped.",
        "- test BLEU (tokenised): Moses-tokenised, case-sensitive, multi-bleu convention; test sacreBLEU: "
        "detokenised, signature below. dev BLEU: the validation BLEU of the selected (best) checkpoint.",
        "- train tok/s: target tokens per second of training (validation excluded); train min: training "
        "minutes (validation excluded); decode sent/s: test-set sentences per second with the config's beam.",
        "",
        "Signatures: " + "; ".join(f"`{sig}`" for sig in signatures),
        "",
        "## BLEU and output length by source length",
        "",
        f"![BLEU and output length by source length]({plot_name})",
        "",
        format_length_buckets(buckets),
        "",
        "## Runs",
        "",
        runs_table(runs),
        "",
        "## Reproducing each row",
        "",
    ]
    for row in rows:
        parts += [f"### {row.system}", "", "```sh", *row.commands, "```", ""]
    return "\n".join(parts)


def runs_table(runs: list[dict[str, Any]]) -> str:
    """One line per trained run: its updates, why it stopped, the source it was trained with and
    the interruptions its log shows."""
    lines = ["| system | seed | updates | stopped | source | interruptions |", "|---|---|---|---|---|---|"]
    for run in runs:
        training = run.get("training") or {}
        if not training:
            continue
        lines.append(f"| {run.get('system', '')} | {run.get('seed', '')} | {training.get('updates', '')} | "
                     f"{training.get('stopped', '')} | {str(training.get('source', 'not recorded'))[:12]} | "
                     f"{training.get('interruptions', 'not recorded')} |")
    return "\n".join(lines + ["", "interruptions: the updates a run resumed at from its `last.pt`, and its "
                                   "restarts from update 0, as its train.log shows them (a restart on another "
                                   "machine, whose log went with it, does not show)."])


def csv_report(rows: list[Row], baseline: str) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    head = ["system", "external", "seeds"]
    for key, _, _ in COLUMNS:
        head += [key, f"{key}_sd"]
    writer.writerow(head + ["significance", "p_value", "p_over_seeds", "t_over_seeds", "p_t_over_seeds"])
    for row in rows:
        line = [row.system, int(row.external), " ".join(str(s) for s in row.seeds if s is not None)]
        for key, _, _ in COLUMNS:
            line += [_csv_number(row.mean(key)), _csv_number(row.sd(key))]
        sig = row.significance or {}
        over_seeds, seeds_t = sig.get("over_seeds") or {}, sig.get("seeds_t") or {}
        line += ["baseline" if row.system == baseline else significance_cell(row), sig.get("max_p", ""),
                 _csv_number(over_seeds.get("p_value")), _csv_number(seeds_t.get("t")),
                 _csv_number(seeds_t.get("p_value"))]
        writer.writerow(line)
    return buffer.getvalue()


def _csv_number(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def json_report(experiment: Experiment, test: TestSet, rows: list[Row], runs: list[dict[str, Any]],
                buckets: dict[str, list[Bucket]], not_reported: list[str], files: dict[str, list[str]]
                ) -> dict[str, Any]:
    return {
        "experiment": asdict(experiment),
        "test": {"src": str(test.src_path), "ref": str(test.ref_path), "sentences": len(test.refs)},
        "columns": headers(),
        "rows": [{"system": r.system, "external": r.external, "seeds": r.seeds,
                  "cells": table_cells(r, experiment.baseline),
                  "mean": {k: r.mean(k) for k, _, _ in COLUMNS}, "sd": {k: r.sd(k) for k, _, _ in COLUMNS},
                  "values": r.values, "significance": r.significance, "commands": r.commands} for r in rows],
        "runs": runs,
        "not_reported": not_reported,
        "files": files,
        "length_buckets": {name: [b.to_dict() for b in bs] for name, bs in buckets.items()},
    }
