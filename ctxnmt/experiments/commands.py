"""`ctxnmt experiment EXPERIMENT.yaml`."""
from __future__ import annotations

from pathlib import Path

from ctxnmt.errors import ConfigError
from ctxnmt.experiments.export import export_results, restore_results
from ctxnmt.experiments.report import train_command
from ctxnmt.experiments.runner import run_experiment
from ctxnmt.experiments.runs import plan_runs, run_state
from ctxnmt.experiments.spec import load_experiment
from ctxnmt.tasks.registry import TASKS


def register(sub) -> None:
    p = sub.add_parser("experiment",
                       description="Train every system of an experiment file under the same budget and seeds, "
                                   "translate the test set, score it, test each system against the baseline and "
                                   "write report.md/.csv/.json (language models: test perplexity, report.md/.json). "
                                   "Rerunning it redoes only what is missing.")
    p.add_argument("experiment", metavar="EXPERIMENT", help="experiment YAML file (see docs/experiments.md)")
    p.add_argument("--quiet", action="store_true", help="no training progress bar or training log on stderr")
    p.add_argument("--dry-run", action="store_true",
                   help="check the file and every system's config, print each run's state and training command, "
                        "and stop")
    p.add_argument("--only", action="append", metavar="SYSTEM[:SEED]",
                   help="train only these runs (repeatable), then report every finished run: lets two processes "
                        "train different runs side by side")
    p.add_argument("--report", action="store_true", help="train nothing: evaluate and report the runs finished so far")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="train up to N runs at once, each in its own process with the config's training.threads "
                        "(default 1: one after the other)")
    p.add_argument("--export", metavar="DIR",
                   help="after the report, copy its small text results to DIR (report, test outputs, scores, "
                        "configs, training logs, significance tests; never checkpoints), e.g. to commit them")
    p.add_argument("--restore", metavar="DIR",
                   help="first copy the runs of an earlier --export DIR that this experiment directory lacks back "
                        "into it (their checkpoints were not kept: their recorded test outputs stand), so that a "
                        "report on a new machine keeps the committed rows")
    p.set_defaults(func=cmd_experiment)


def cmd_experiment(args) -> int:
    experiment = load_experiment(args.experiment)
    if args.dry_run:
        return dry_run(experiment)
    if args.only and args.report:
        raise ConfigError("--only trains runs and --report trains none: give one of them")
    if args.restore:
        restored = restore_results(Path(args.restore), experiment.root, TASKS[experiment.task].kept)
        print(f"restored {len(restored)} runs from {args.restore}")
    paths = run_experiment(experiment, quiet=args.quiet, only=args.only, train=not args.report,
                           reload=lambda: load_experiment(args.experiment), jobs=args.jobs)
    if paths is not None:
        print(paths["md"].read_text(encoding="utf-8").split("\n## ")[0].rstrip())
        if args.export:
            copied, unreported = export_results(experiment.root, Path(args.export))
            print(f"exported {len(copied)} files to {args.export}" if copied
                  else f"{args.export} is the experiment directory: nothing to copy")
            if unreported:
                print(f"left in {args.export}, not in this report: "
                      f"{', '.join(str(d.relative_to(args.export)) for d in unreported)} "
                      "(delete them if their system was removed; --restore brings back runs this machine lacks)")
    return 0


def dry_run(experiment) -> int:
    for run in plan_runs(experiment):
        print(f"{run.system} seed {run.seed}: {run_state(run, rewrite=False).value}, {run.model_dir}")
        print(f"  {train_command(run.config_path, run.overrides, TASKS[run.task].command)}")
    for spec in experiment.systems:
        if spec.external:
            print(f"{spec.name}: external output {spec.output}")
        if spec.ensemble:
            print(f"{spec.name}: ensemble of {' + '.join(spec.ensemble)}, seeds "
                  f"{', '.join(map(str, experiment.seeds_of(spec)))}")
    return 0
