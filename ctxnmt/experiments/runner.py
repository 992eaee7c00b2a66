"""`ctxnmt experiment`: train every system under one budget, then translate, score, test and
report (or, for language models, report the perplexities their runs scored).

Every step is resumable: finished runs are not retrained, interrupted ones resume
from their last checkpoint, and translations, scores and significance tests are
recomputed only when what they depend on has changed.  Every run's model
directory is checked against its effective config before anything is trained
(with --only, every selected run's; the others are checked for the report).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxnmt.config import LANGUAGE_MODEL, TRANSLATION
from ctxnmt.errors import ConfigError
from ctxnmt.evaluation.metrics import length_buckets, mean_buckets
from ctxnmt.experiments import perplexity
from ctxnmt.experiments import report as rep
from ctxnmt.experiments.evaluate import (
    Output,
    TestSet,
    document_ids,
    external_output,
    external_scores_path,
    hyp_path,
    load_test_set,
    replicate_significance,
    scored_output,
    significance,
    translate_ensemble,
    translate_run,
    undecodable_members,
)
from ctxnmt.experiments.runs import (
    Run,
    RunState,
    plan_runs,
    prepare_shared,
    run_key,
    run_state,
    select_runs,
    shared_data,
    train,
    training_record,
)
from ctxnmt.experiments.spec import Experiment
from ctxnmt.utils.messages import Log, stderr_log
from ctxnmt.utils.processes import check_jobs, run_side_by_side
from ctxnmt.utils.selectors import label


def check_runs(runs: list[Run]) -> dict[int, RunState]:
    """The state of every run, checked before anything is trained: a mismatch stops the experiment."""
    return {id(run): run_state(run) for run in runs}


def train_all(experiment: Experiment, plan: list[Run], runs: list[Run], states: dict[int, RunState], log: Log,
              quiet: bool, jobs: int = 1) -> None:
    """Train `runs` (of the experiment's `plan`) not finished yet, in order, or up to `jobs` of
    them at once (each in its own process, quiet: its log is its train.log)."""
    check_jobs(jobs, max((run.config.training.threads for run in runs), default=1), log)
    todo = [run for run in runs if states[id(run)] is not RunState.DONE]
    for run in runs:
        if states[id(run)] is RunState.DONE:
            log(f"{run.system} seed {run.seed}: already trained in {run.model_dir}")
    # judged on the whole experiment, not the runs of this process: an --only beside it may
    # train systems of another data section, and {out_dir}/prep must then not be shared
    if todo and shared_data(plan):
        prepare_shared(experiment, todo, log)
    for run in todo:
        log(f"{run.system} seed {run.seed}: {states[id(run)].doing} in {run.model_dir}")
        if jobs == 1:
            train(run, quiet)
    if jobs > 1 and todo:
        run_side_by_side([(f"{run.system} seed {run.seed}", train, (run, True)) for run in todo], jobs, log)


def split_for_report(runs: list[Run], selected: list[Run] | None, log: Log
                     ) -> tuple[list[Run], list[str], list[str]]:
    """The finished runs, in order; the SYSTEM:SEED of those still training; and the
    "SYSTEM:SEED (why)" of those left out.

    With `selected` (the runs an --only process trains) the other runs belong to other
    processes, perhaps on a newer checkout whose configs carry keys this one does not
    know: one whose directory disagrees with this process's plan is left out of the
    report with its reason, so that hours of training still end in a report that names
    what it lacks.  A selected run's disagreement, or any run's without `selected`, stops
    the command."""
    mine = None if selected is None else {run_key(run) for run in selected}
    finished, waiting, left_out = [], [], []
    for run in runs:
        try:
            current = run_state(run)
        except ConfigError as err:
            if mine is None or run_key(run) in mine:
                raise
            log(f"left out of the report: {label(run_key(run))}: {err}")
            left_out.append(f"{label(run_key(run))} ({err})")
            continue
        if current is RunState.DONE:
            finished.append(run)
        else:
            waiting.append(label(run_key(run)))
    return finished, waiting, left_out


def evaluate_runs(runs: list[Run], test: TestSet, log) -> dict[str, list[Output]]:
    outputs: dict[str, list[Output]] = {}
    for run in runs:
        decode = translate_run(run, test, log)
        output = scored_output(run.system, run.seed, hyp_path(run, test), test, run.model_dir / "scores.json", decode,
                               training_record(run))
        outputs.setdefault(run.system, []).append(output)
    return outputs


def evaluate_ensembles(experiment: Experiment, runs: list[Run], test: TestSet, log
                       ) -> tuple[dict[str, list[Output]], list[str]]:
    """Each ensemble, seed by seed, where every member's run of that seed has finished and
    can still be decoded: a member restored without its checkpoint leaves the seed out,
    unless the ensemble's own translation was restored with it.  Also what was left out, and why."""
    outputs: dict[str, list[Output]] = {}
    left_out: list[str] = []
    by_key = {(run.system, run.seed): run for run in runs}
    for spec in experiment.ensembles:
        for seed in experiment.seeds_of(spec):
            members = [by_key.get((name, seed)) for name in spec.ensemble]
            if None in members:
                continue
            lacking = undecodable_members(spec.name, seed, members, experiment.root)
            if lacking:
                reason = (f"{', '.join(f'{r.system} seed {seed}' for r in lacking)} kept no checkpoint "
                          "(restored from an export); retrain to decode this ensemble")
                log(f"{spec.name} seed {seed}: left out: {reason}")
                left_out.append(f"{spec.name}:{seed} ({reason})")
                continue
            hyp, decode = translate_ensemble(spec.name, seed, members, test, experiment.root, log)
            output = scored_output(spec.name, seed, hyp, test, hyp.parent / "scores.json", decode)
            outputs.setdefault(spec.name, []).append(output)
    return outputs, left_out


def seed_pairs(baseline: list[Output], system: list[Output]) -> list[tuple[Output, Output]]:
    """Trained systems are paired seed by seed; an external output is paired with every seed."""
    if baseline[0].seed is not None and system[0].seed is not None:
        by_seed = {o.seed: o for o in baseline}
        return [(by_seed[o.seed], o) for o in system if o.seed in by_seed]  # a partial report may lack one
    return [(b, s) for b in baseline for s in system]


def _tag(output: Output) -> str:
    return output.system if output.seed is None else f"{output.system}-seed{output.seed}"


def significance_tests(experiment: Experiment, outputs: dict[str, list[Output]], test: TestSet
                       ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]], list[Path]]:
    """Each system's paired test against the baseline, seed by seed; per system trained with two
    or more of the baseline's seeds, one test over all its seed pairs; and the files that hold
    them (the seed pairs' first)."""
    baseline = outputs[experiment.baseline]
    tests: dict[str, list[dict[str, Any]]] = {}
    over_seeds = {}
    files, replicate_files = [], []
    for name, system in outputs.items():
        pairs = seed_pairs(baseline, system) if name != experiment.baseline else []
        for b, s in pairs:
            files.append(experiment.root / "significance" / f"{_tag(s)}-vs-{_tag(b)}.json")
            tests.setdefault(name, []).append(significance(b, s, test, experiment.significance, files[-1]))
        if len(pairs) >= 2 and system[0].seed is not None:
            seeds = "-".join(str(s.seed) for _, s in pairs)
            replicate_files.append(experiment.root / "significance" /
                                   f"{name}-seeds{seeds}-vs-{experiment.baseline}.json")
            over_seeds[name] = replicate_significance(pairs, test, experiment.significance, replicate_files[-1])
    return tests, over_seeds, files + replicate_files


def computed_from(root: Path, outputs: dict[str, list[Output]], significance_files: list[Path],
                  external_systems: set[str]) -> dict[str, list[str]]:
    """What the report was computed from, relative to the experiment directory `root`: the
    directories of its trained runs and ensembles, the scores of its external outputs and its
    significance results.  `--export` copies these and nothing else."""
    def relative(paths) -> list[str]:
        return [str(Path(path).relative_to(root)) for path in paths]

    trained = [o for name, outs in outputs.items() if name not in external_systems for o in outs]
    external = [o for name, outs in outputs.items() if name in external_systems for o in outs]
    return {"runs": relative(o.hyp_path.parent for o in trained),
            "external": relative(external_scores_path(root, o.system, o.seed) for o in external),
            "significance": relative(significance_files)}


def row_commands(experiment: Experiment, name: str, runs: list[Run], outputs: dict[str, list[Output]],
                 test: TestSet) -> list[str]:
    commands = []
    for run in runs:
        if run.system == name:
            hyp = hyp_path(run, test)
            commands += [rep.train_command(run.config_path, run.overrides),
                         rep.translate_command(run.model_dir, test, hyp, document_ids(run, test)),
                         rep.score_command(hyp, test)]
    for output in outputs.get(name, []) if experiment.system(name).ensemble else []:
        members = [run for member in experiment.system(name).ensemble for run in runs
                   if run.system == member and run.seed == output.seed]
        doc_ids = next((d for d in (document_ids(run, test) for run in members) if d), None)
        commands += [rep.translate_command([run.model_dir for run in members], test, output.hyp_path, doc_ids),
                     rep.score_command(output.hyp_path, test)]
    if experiment.system(name).external:
        commands += [rep.score_command(output.hyp_path, test) for output in outputs[name]]
    if name != experiment.baseline:
        commands += [rep.significance_command(b.hyp_path, s.hyp_path, test, experiment)
                     for b, s in seed_pairs(outputs[experiment.baseline], outputs[name])]
    return commands


def run_details(outputs: dict[str, list[Output]], tests: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    details = []
    for name, outs in outputs.items():
        for output in outs:
            details.append({"system": name, "seed": output.seed, "hyp": str(output.hyp_path),
                            "scores": output.scores, "decode": output.decode, "training": output.training})
    for name, results in tests.items():
        details.append({"system": name, "significance": results})
    return details


def run_experiment(experiment: Experiment, log: Log = stderr_log("experiment: "), quiet: bool = False,
                   only: list[str] | None = None, train: bool = True,
                   reload: Callable[[], Experiment] | None = None, jobs: int = 1) -> dict[str, Path] | None:
    """Everything `ctxnmt experiment` does; returns the paths of the report files.

    `only` (SYSTEM or SYSTEM:SEED selectors) trains just those runs, and `train=False`
    none; the report then covers the runs finished so far, so that two processes can
    train different runs of one experiment side by side and results can be read as
    they come.  None when the baseline has no finished run yet.  `jobs` trains that
    many runs at once, each in its own process.

    `reload` reads the experiment again after training: a training takes hours, and
    the file or its configs may change meanwhile (a system added, a config fixed and
    its runs retrained by another process).  The report follows them as they are then,
    as a `--report` would, instead of judging the other runs by a stale plan."""
    runs = plan_runs(experiment)
    mine = select_runs(runs, only) if only else runs
    if train:
        train_all(experiment, runs, mine, check_runs(mine), log, quiet, jobs)
        if reload is not None:
            experiment, runs = _reread(experiment, runs, reload, log)
    finished, waiting, disagreeing = split_for_report(runs, mine if only else None, log)
    if waiting:
        log(f"not finished yet, left out of the report: {', '.join(waiting)}")
    if not any(run.system == experiment.baseline for run in finished) and experiment.system(experiment.baseline).config:
        log("the baseline has no finished run yet: no report")
        return None
    if not finished:  # an external baseline: the test set is read through a trained run
        log("no run has finished yet: no report")
        return None
    return REPORTS[experiment.task](experiment, finished, waiting, disagreeing, log)


def translation_report(experiment: Experiment, runs: list[Run], waiting: list[str], disagreeing: list[str], log
                       ) -> dict[str, Path] | None:
    """Translate the test set with the finished `runs` and their ensembles, score and test
    the outputs and write the report; None when the baseline has no output."""
    # read through the baseline's first run, or the first trained system's when the baseline is external
    test = load_test_set(next((run for run in runs if run.system == experiment.baseline), runs[0]), log=log)
    outputs = evaluate_runs(runs, test, log)
    ensembles, ensembles_left_out = evaluate_ensembles(experiment, runs, test, log)
    outputs.update(ensembles)
    for spec in experiment.systems:
        if spec.external:
            outputs[spec.name] = [external_output(spec.name, path, test, experiment.root, seed)
                                  for seed, path in spec.output_paths(experiment.run_seeds).items()]
    outputs = {spec.name: outputs[spec.name] for spec in experiment.systems if spec.name in outputs}  # file order
    if experiment.baseline not in outputs:  # an ensemble baseline none of whose seeds could be decoded
        log("the baseline has no output yet: no report")
        return None
    tests, over_seeds, significance_files = significance_tests(experiment, outputs, test)
    buckets = {name: mean_buckets([length_buckets(test.src, o.lines, test.refs) for o in outs])
               for name, outs in outputs.items()}
    metric = experiment.significance.metric
    rows = [rep.make_row(name, experiment.system(name).external, outs,
                         row_commands(experiment, name, runs, outputs, test),
                         rep.summarise_tests(tests[name], metric, over_seeds.get(name)) if name in tests else None)
            for name, outs in outputs.items()]
    signatures = list(dict.fromkeys(sig for outs in outputs.values() for o in outs
                                    for sig in o.scores["signatures"].values()))
    not_reported = [f"{name} (not finished)" for name in waiting] + disagreeing + ensembles_left_out
    paths = rep.write_report(experiment, test, rows, run_details(outputs, tests), buckets, signatures, not_reported,
                             computed_from(experiment.root, outputs, significance_files,
                                           {spec.name for spec in experiment.systems if spec.external}))
    log(f"report written to {paths['md']}")
    return paths


# Each task's report, by the task's name (ctxnmt.config.TASK_NAMES): its writer reads the experiment's runs, so
# it lives here, above the tasks.
REPORTS = {TRANSLATION: translation_report, LANGUAGE_MODEL: perplexity.write_report}


def _reread(experiment: Experiment, runs: list[Run], reload: Callable[[], Experiment], log
            ) -> tuple[Experiment, list[Run]]:
    current = reload()
    planned = plan_runs(current)
    if current != experiment or [r.config for r in planned] != [r.config for r in runs]:
        log("the experiment changed while training: the report follows it as it is now")
    return current, planned

