"""The report of a language-model experiment: each system's test perplexity over seeds.

The target-context papers report their summaries' effect on a language model as one
perplexity per system.  Over seeds the honest figure is a mean with its spread and the
per-seed difference to the baseline trained with the same seed, with two significance
tests on the test lines' log-probabilities: paired approximate randomisation per seed,
and Clark et al.'s stratified version over all seeds together
(ctxnmt.evaluation.replicates), the statistic being the corpus perplexity.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ctxnmt.errors import DataError
from ctxnmt.evaluation.replicates import seed_t_test, stratified_result
from ctxnmt.evaluation.significance import DEFAULT_SAMPLES, SigResult
from ctxnmt.experiments.report import train_command
from ctxnmt.experiments.runs import Run
from ctxnmt.experiments.spec import Experiment
from ctxnmt.lm.scoring import LINE_SCORES
from ctxnmt.tasks.registry import TASKS
from ctxnmt.training.log import NOT_INTERRUPTED, logged_interruptions
from ctxnmt.utils.io import atomic_write, make_directory, read_json_object
from ctxnmt.utils.messages import Log

TRIALS = DEFAULT_SAMPLES["ar"]
RUN_FACTS = ("dev_ppl", "updates", "minutes")  # from each run's results.json, reported beside its test perplexity


def interruption_cell(seeds: list[int], described: list[str]) -> str:
    """The seeds whose training was interrupted, each with what its log shows; `none` if no seed's was."""
    shown = "; ".join(f"{seed}: {text}" for seed, text in zip(seeds, described) if text != NOT_INTERRUPTED)
    return shown or NOT_INTERRUPTED


def source_cell(seeds: list[int], sources: list[str]) -> str:
    """The commit the seeds were trained from (12 characters), per seed where they differ."""
    short = [source[:12] for source in sources]
    if len(set(short)) == 1:
        return short[0]
    return ", ".join(f"{seed}: {source}" for seed, source in zip(seeds, short))


def line_statistics(directory: Path) -> np.ndarray | None:
    """(test lines, 2): each line's negative log-probability and token count; None for a
    run that finished before they were kept (it is reported, but not tested)."""
    path = directory / LINE_SCORES
    if not path.is_file():
        return None
    try:
        rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
        statistics_ = np.array([(-float(logprob), int(n)) for logprob, n in rows], dtype=np.float64)
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: not one 'log-probability<TAB>tokens' pair per line ({err})") from None
    if not len(statistics_):
        raise DataError(f"{path}: empty; a finished run scores every test line")
    return statistics_


def perplexity(statistics_sum: np.ndarray) -> float:
    return math.exp(statistics_sum[0] / statistics_sum[1])


def perplexity_test(baseline_runs: list[np.ndarray], system_runs: list[np.ndarray], trials: int = TRIALS,
                    seed: int = 12345) -> SigResult:
    """Stratified approximate randomisation on corpus perplexity: replicate r of each system
    is one seed's per-line (negative log-probability, tokens) of the same test text."""
    for r, (a, b) in enumerate(zip(baseline_runs, system_runs, strict=True)):
        if a.shape != b.shape or not np.array_equal(a[:, 1], b[:, 1]):
            raise DataError(f"replicate {r + 1}: the two runs scored different test texts "
                            f"({len(a)} and {len(b)} lines, or other token counts)")
    return stratified_result(np.concatenate(baseline_runs), np.concatenate(system_runs), len(baseline_runs),
                             perplexity, "perplexity", trials, seed)


def summarise(results: dict[str, dict[int, dict]], baseline: str, trials: int, seed: int) -> list[dict]:
    """A row per system from its finished runs ({seed: {"ppl", "lines"}}); the tests pair
    each seed with the baseline's same seed, over the seeds both have finished."""

    def test(base: list[np.ndarray], system: list[np.ndarray]) -> float:
        return perplexity_test(base, system, trials, seed).p_value

    rows = []
    for name, by_seed in results.items():
        seeds = sorted(by_seed)
        ppl = [by_seed[s]["ppl"] for s in seeds]
        mean, sd = _mean_sd(ppl)
        row = {"system": name, "seeds": seeds, "test_ppl": ppl, "mean": mean, "sd": sd,
               **{key: [by_seed[s][key] for s in seeds] for key in (*RUN_FACTS, "interruptions", "source")}}
        base = results.get(baseline, {})
        shared = [s for s in seeds if s in base]
        if name != baseline and shared:
            deltas = [by_seed[s]["ppl"] - base[s]["ppl"] for s in shared]
            tested = [s for s in shared if by_seed[s]["lines"] is not None and base[s]["lines"] is not None]
            delta_mean, delta_sd = _mean_sd(deltas)
            row.update(paired_seeds=shared, delta=deltas, delta_mean=delta_mean, delta_sd=delta_sd,
                       lower_every_seed=all(d < 0 for d in deltas), t_over_seeds=seed_t_test(deltas),
                       p_per_seed={str(s): test([base[s]["lines"]], [by_seed[s]["lines"]]) for s in tested},
                       p_over_seeds=test([base[s]["lines"] for s in tested], [by_seed[s]["lines"] for s in tested])
                       if tested else None)
        rows.append(row)
    return rows


def _p(p: float | None) -> str:
    if p is None:
        return "–"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _mean_sd(values: list[float]) -> tuple[float, float | None]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def _pm(mean: float | None, sd: float | None) -> str:
    if mean is None:
        return "–"
    return f"{mean:.2f}" if sd is None else f"{mean:.2f} ± {sd:.2f}"


def markdown(rows: list[dict], baseline: str, seeds: list[int], waiting: list[str], commands: list[str],
             left_out: list[str] = (), trials: int = TRIALS) -> str:
    lines = [f"# LM comparison: test perplexity over seeds {', '.join(map(str, seeds))}", ""]
    if waiting:
        lines += [f"Not finished yet: {', '.join(waiting)}.  Each row has its finished seeds; Δ and p "
                  "pair them with the baseline's same seeds.", ""]
    if left_out:
        lines += [f"Left out: {'; '.join(left_out)}.", ""]
    lines += ["| system | seeds | test ppl (mean ± sd) | per seed | Δ vs baseline, same seed (mean ± sd) "
              "| p per seed (paired AR) | p over seeds (stratified AR) | p over seeds (t-test on Δ) "
              "| smallest detectable Δ | lower on every seed | dev ppl | updates | train min | interruptions | source |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        per_seed = ", ".join(f"{p:.2f}" for p in row["test_ppl"])
        if row["system"] == baseline:
            cells = ["baseline", "", "", "", "", ""]
        elif "delta" in row:
            per_seed_p = ", ".join(f"{seed}: {_p(p)}" for seed, p in row["p_per_seed"].items()) or "–"
            seeds_t = row["t_over_seeds"]
            cells = [_pm(row["delta_mean"], row["delta_sd"]), per_seed_p, _p(row["p_over_seeds"]),
                     _p(seeds_t["p_value"] if seeds_t else None),
                     f"{seeds_t['detectable']:.2f}" if seeds_t else "–", "yes" if row["lower_every_seed"] else "no"]
        else:  # none of its seeds has a finished baseline yet
            cells = ["–", "–", "–", "–", "–", ""]
        cells += [_pm(*_mean_sd(row["dev_ppl"])), f"{statistics.fmean(row['updates']):,.0f}",
                  f"{statistics.fmean(row['minutes']):.1f}",
                  interruption_cell(row["seeds"], row["interruptions"]), source_cell(row["seeds"], row["source"])]
        lines.append(f"| {row['system']} | {', '.join(map(str, row['seeds']))} | {_pm(row['mean'], row['sd'])} "
                     f"| {per_seed} | {' | '.join(cells)} |")
    lines += ["", "Δ: the mean of the per-seed differences.  p: two-sided approximate randomisation over "
              f"the test lines' log-probabilities ({trials} trials), per seed and over all seeds stratified by "
              "seed (Clark et al. 2011), the statistic being the perplexity of the pooled lines; a seed whose "
              "run kept no per-line scores is not tested.  t-test on Δ: the per-seed differences as the sample "
              "of a two-sided one-sample t-test (n − 1 degrees of freedom): the stratified test resamples lines "
              "within seeds, this one asks whether the seeds agree.  smallest detectable Δ: the smallest "
              "mean difference (in perplexity) that t-test would call significant (p < 0.05) at this row's spread "
              "of per-seed differences, t(0.975, n − 1) · sd / √n.  dev ppl: of the best checkpoint (the one tested); "
              "updates and train min (validation excluded): means over the seeds.  interruptions: per seed, the "
              "updates a run resumed at from its `last.pt` and its restarts from update 0, as its train.log shows "
              "them (a restart on another machine, whose log went with it, cannot show).  source: the commit "
              "of the checkout each seed was trained from (`+modified`: with uncommitted changes; `not recorded`: "
              "trained before runs kept it).", "",
              "Each run alone (`ctxnmt experiment` trains the missing ones; with `--report` it only reports):", "",
              "```sh", *commands, "```"]
    return "\n".join(lines) + "\n"


def run_results(run: Run) -> dict:
    """What the report reads of a finished run."""
    stored = read_json_object(run.model_dir / "results.json")
    return {"ppl": stored["test_ppl"], "lines": line_statistics(run.model_dir),
            "interruptions": logged_interruptions(run.model_dir), "source": stored.get("source", "not recorded"),
            **{key: stored[key] for key in RUN_FACTS}}


def write_report(experiment: Experiment, runs: list[Run], waiting: list[str], left_out: list[str], log: Log
                 ) -> dict[str, Path]:
    """report.md and report.json of the finished `runs`; `waiting` and `left_out` name the
    runs it lacks.  report.json lists the runs (`files`), which is what an export copies."""
    results: dict[str, dict[int, dict]] = {}
    for run in runs:
        results.setdefault(run.system, {})[run.seed] = run_results(run)
    trials = experiment.significance.samples or TRIALS
    rows = summarise(results, experiment.baseline, trials, experiment.significance.seed)
    root = experiment.root
    make_directory(root)
    files = {"runs": [str(run.model_dir.relative_to(root)) for run in runs], "external": [], "significance": []}
    paths = {"md": root / "report.md", "json": root / "report.json"}
    with atomic_write(paths["json"], "w") as fh:
        json.dump({"experiment": asdict(experiment), "seeds": experiment.run_seeds, "waiting": waiting,
                   "left_out": left_out, "rows": rows, "files": files}, fh, indent=1)
    commands = [train_command(run.config_path, run.overrides, TASKS[run.task].command) for run in runs]
    with atomic_write(paths["md"], "w") as fh:
        fh.write(markdown(rows, experiment.baseline, experiment.run_seeds, waiting, commands, left_out, trials))
    log(f"report written to {paths['md']}")
    return paths


