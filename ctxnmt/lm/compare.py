"""`ctxnmt lm compare`: several LM configs, each trained with several seeds, by test perplexity.

The target-context papers report their summaries' effect on a language model as one
perplexity per system.  Over seeds the honest figure is a mean with its spread and the
per-seed difference to the baseline (the first config) trained with the same seed, with
two significance tests on the test lines' log-probabilities: paired approximate
randomisation per seed, and Clark et al.'s stratified version over all seeds together
(ctxnmt.evaluation.replicates), the statistic being the corpus perplexity.

A run is `{out}/{config name}/seed{s}` and a finished one (results.json beside a
config.yaml equal to its effective config, wherever the directory now lies) is never
trained again; an interrupted one goes on exactly from its last checkpoint.  So the
command can be run again after an interruption, `--only` lets two processes train
different runs of one comparison, and every call reports the runs finished so far.
"""
from __future__ import annotations

import json
import math
import shlex
import shutil
import statistics
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ctxnmt.config import build_typed, config_dict, config_difference, override
from ctxnmt.errors import ConfigError, DataError
from ctxnmt.evaluation.replicates import seed_t_test, stratified_result
from ctxnmt.evaluation.significance import SigResult
from ctxnmt.lm.config import LMConfig, load_lm_config
from ctxnmt.lm.config import validate as validate_lm
from ctxnmt.lm.run import train_and_score
from ctxnmt.lm.scoring import LINE_SCORES
from ctxnmt.training.log import NOT_INTERRUPTED, logged_interruptions
from ctxnmt.training.runs import (PlannedRun, RunState, directory_state, saved_as_trained, split_for_report,
                                  train_unfinished)
from ctxnmt.utils.io import atomic_write, copy_into, make_directory, read_json_object
from ctxnmt.utils.lock import TrainingLock
from ctxnmt.utils.messages import Log, stderr_log
from ctxnmt.utils.selectors import select

TRIALS = 10000
RUN_FACTS = ("dev_ppl", "updates", "minutes")  # from each run's results.json, reported beside its test perplexity
# What `--report` needs of a finished run (results.json marks it finished), and the report itself:
# the small files `--export` copies, to be committed.
RUN_FILES = ("config.yaml", "train.log", LINE_SCORES, "results.json")
REPORT_FILES = ("report.md", "report.json")


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


def run_config(config_path: str, overrides: list[str], seed: int, out: Path):
    name = load_lm_config(config_path, overrides).name
    return load_lm_config(config_path, [*overrides, override("training.seed", seed),
                                        override("model_dir", str(out / name / f"seed{seed}"))])


def run_state(config) -> RunState:
    """DONE (results.json), TRAINED (done.json but not yet scored), RESUME (last.pt beside the
    same config.yaml) or FRESH; another config is an error."""

    def difference(saved: Path) -> str:  # a run is the same run wherever it was copied: model_dir aside
        trained = build_typed(LMConfig, saved_as_trained(saved, "results.json"))
        validate_lm(trained)
        return config_difference(config_dict(trained), config_dict(config), ignore=("model_dir",))

    return directory_state(Path(config.model_dir), difference, "this comparison; use another --out or delete it",
                           finished="results.json")


def clear_fresh(config, state: RunState, log: Log) -> None:
    """An unfinished run without a checkpoint starts again from an empty directory."""
    directory = Path(config.model_dir)
    if state is RunState.FRESH and directory.exists():
        TrainingLock(directory).acquire().release()  # never delete a run another process is training
        log(f"{directory}: unfinished and without a checkpoint, training again from the start")
        shutil.rmtree(directory)


def train_runs(chosen: list[tuple[int, object, RunState]], jobs: int, log: Log) -> None:
    """Train (seed, config, state) runs in order, or up to `jobs` at once in their own processes."""

    def clear() -> None:
        for _, config, state in chosen:
            clear_fresh(config, state, log)

    train_unfinished([PlannedRun(f"{config.name} seed {seed}", Path(config.model_dir), state, config.training.threads,
                                 train_from_now, (config,)) for seed, config, state in chosen], jobs, log, before=clear)


def train_from_now(config) -> None:
    """Train (or score) a run from its state now, not the planned one: the plan may be hours
    old, and another process (an --only beside this one) may have finished or begun it since."""
    state = run_state(config)
    if state is not RunState.DONE:
        train_and_score(config, True, state is RunState.RESUME, state is RunState.TRAINED)


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


def summarise(results: dict[str, dict[int, dict]], baseline: str) -> list[dict]:
    """A row per system from its finished runs ({seed: {"ppl", "lines"}}); the tests pair
    each seed with the baseline's same seed, over the seeds both have finished."""
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
                       p_per_seed={str(s): perplexity_test([base[s]["lines"]], [by_seed[s]["lines"]]).p_value
                                   for s in tested},
                       p_over_seeds=perplexity_test([base[s]["lines"] for s in tested],
                                                    [by_seed[s]["lines"] for s in tested]).p_value
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


def markdown(rows: list[dict], baseline: str, seeds: list[int], waiting: list[str], command: str,
             left_out: list[str] = ()) -> str:
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
              f"the test lines' log-probabilities ({TRIALS} trials), per seed and over all seeds stratified by "
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
              "Train the missing runs (or, with `--report`, only report the finished ones):", "",
              f"```sh\n{command}\n```"]
    return "\n".join(lines) + "\n"


def shell_command(configs: list[str], overrides: list[str], seeds: list[int], out: Path) -> str:
    args = ["ctxnmt", "lm", "compare", *map(str, configs), "--seeds", *map(str, seeds), "--out", str(out)]
    for override in overrides:
        args += ["--set", override]
    return " ".join(shlex.quote(a) for a in args)


def run_key(run: tuple[str, int, object]) -> tuple[str, int]:
    """A run's (config name, seed), as `--only` names it."""
    return run[2].name, run[1]


def export_comparison(out: Path, run_dirs: list[Path], dest: Path) -> list[Path]:
    """Copy the report under `out` and each finished run's small files (RUN_FILES) to `dest`,
    keeping the layout ({name}/seed{s}); returns the copies."""
    if dest.resolve() == out.resolve():
        return []
    copied = []
    for directory in run_dirs:
        files = [directory / name for name in RUN_FILES if (directory / name).is_file()]
        target = dest / directory.relative_to(out)
        copy_into(files, target, last=("results.json",), replace=True)  # no stale file of an earlier export stays
        copied += [target / f.name for f in files]
    dest.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:
        shutil.copyfile(out / name, dest / name)
        copied.append(dest / name)
    return copied


def _check_same_text(runs: list) -> None:
    """Perplexities compare only over one text cut into one vocabulary: another vocab_size
    changes what <unk> covers, another tokenisation what a token is."""
    first = runs[0][2]
    for path, _, config in runs:
        differs = config_difference(asdict(first.data), asdict(config.data))
        if differs:
            raise ConfigError(f"{path}: its data section differs from {runs[0][0]}'s (data.{differs}); "
                              "perplexities over other texts or vocabularies do not compare")


def compare(configs: list[str], overrides: list[str], seeds: list[int], out: Path,
            log: Log = stderr_log("lm compare: "), only: list[str] | None = None, train: bool = True, jobs: int = 1,
            export: Path | None = None) -> list[dict] | None:
    """Train what is missing (of `only`'s runs, if given; nothing unless `train`; up to
    `jobs` at once), then report the finished runs (and copy them and the report to `export`);
    None, and no report, while none has finished."""
    if len(set(seeds)) != len(seeds) or not seeds:
        raise ConfigError(f"--seeds must be distinct, got {seeds}")
    runs = [(path, seed, run_config(path, overrides, seed, out)) for path in configs for seed in seeds]
    names = list(dict.fromkeys(config.name for _, _, config in runs))
    if len(names) != len(configs):
        raise ConfigError("two configs have the same name; each system needs its own (set it with name: in the file)")
    _check_same_text(runs)
    chosen = select(runs, only, run_key, "comparison") if only else runs
    states = {id(config): run_state(config) for _, _, config in chosen}  # every directory to train checked first
    if train:
        train_runs([(seed, config, states[id(config)]) for _, seed, config in chosen], jobs, log)
    finished, waiting, left_out = split_for_report(runs, lambda run: run_state(run[2]), run_key, chosen if only else None, log)
    results: dict[str, dict[int, dict]] = {}
    for _, seed, config in finished:
        directory = Path(config.model_dir)
        stored = read_json_object(directory / "results.json")
        results.setdefault(config.name, {})[seed] = {"ppl": stored["test_ppl"], "lines": line_statistics(directory),
                                                     "interruptions": logged_interruptions(directory),
                                                     "source": stored.get("source", "not recorded"),
                                                     **{key: stored[key] for key in RUN_FACTS}}
    if waiting:
        log(f"not finished yet: {', '.join(waiting)}")
    if not results:
        return None
    rows = summarise(results, names[0])
    make_directory(out)
    with atomic_write(out / "report.json", "w") as fh:
        json.dump({"configs": configs, "overrides": overrides, "seeds": seeds, "waiting": waiting,
                   "left_out": left_out, "rows": rows},
                  fh, indent=1)
    with atomic_write(out / "report.md", "w") as fh:
        fh.write(markdown(rows, names[0], seeds, waiting, shell_command(configs, overrides, seeds, out), left_out))
    if export is not None:
        copied = export_comparison(out, [Path(config.model_dir) for _, _, config in finished], export)
        log(f"exported {len(copied)} files to {export}" if copied else f"{export} is --out: nothing to copy")
    return rows
