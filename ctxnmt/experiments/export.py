"""Copy an experiment's small text results out of its run directory, to be committed.

Run directories hold checkpoints (tens of MB each) that never belong in git; the numbers
of a report, and everything needed to re-score or re-test them, are a few small files:
the report itself, each run's test output, scores, decoding record, effective config and
training log (its validations are the learning curve), and the significance results.
Restoring copies a run's small files back into an experiment directory that lacks the
run, so that a report on a new machine keeps the committed rows without retraining them.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from ctxnmt.errors import DataError
from ctxnmt.utils.io import copy_into

REPORT_FILES = ("report.md", "report.csv", "report.json", "length-buckets.png")
RUN_FILES = ("config.yaml", "train.log", "done.json", "decode.json", "scores.json",
             "alignment.json")  # the last where `ctxnmt analyze alignment RUN -o RUN/alignment.json` was run
RUN_PATTERNS = ("test.hyp.*",)


def _run_files(directory: Path) -> list[Path]:
    files = [directory / name for name in RUN_FILES if (directory / name).is_file()]
    return files + sorted(p for pattern in RUN_PATTERNS for p in directory.glob(pattern) if p.is_file())


def export_results(root: Path, dest: Path) -> list[Path]:
    """Copy the report, the small files of every run and ensemble it reports and the
    significance results from experiment directory `root` to `dest`, keeping the layout;
    returns the copies.  A run the report leaves out (still training, trained under another
    config, or of a system no longer in the experiment) is not exported: a copy would be
    restored on a new machine as if it were one of the experiment's results."""
    sources = [root / name for name in REPORT_FILES if (root / name).is_file()]
    for run_dir in reported_run_dirs(root):
        sources += _run_files(run_dir)
    sources += sorted((root / "significance").glob("*.json"))
    sources += sorted((root / "external").glob("*.json"))
    copied = []
    for source in sources:
        target = dest / source.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        copied.append(target)
    return copied


def reported_run_dirs(root: Path) -> list[Path]:
    """The directories of the trained runs and ensembles that `root`'s report.json lists."""
    report = root / "report.json"
    if not report.is_file():
        raise DataError(f"{report}: no report to export (write one with --report first)")
    dirs = []
    for entry in json.loads(report.read_text(encoding="utf-8"))["runs"]:
        if entry.get("seed") is None:  # an external output or a significance entry
            continue
        for group in ("systems", "ensembles"):
            run_dir = root / group / entry["system"] / f"seed{entry['seed']}"
            if run_dir.is_dir():
                dirs.append(run_dir)
                break
    return dirs


def restore_results(source: Path, root: Path) -> list[Path]:
    """Copy every finished run's and ensemble's small files from an export `source` into experiment
    directory `root` where that run is absent (no config.yaml there; an ensemble: no decode.json),
    each run directory appearing whole; returns the restored run directories."""
    if not (source / "report.json").is_file():
        raise DataError(f"{source}: not an exported experiment (no report.json there)")
    restored = []
    for group, marker in (("systems", "config.yaml"), ("ensembles", "decode.json")):
        for run_dir in sorted((source / group).glob("*/seed*")):
            target = root / run_dir.relative_to(source)
            if (target / marker).exists() or not (run_dir / "decode.json").is_file():
                continue  # a local run wins; an export without its translation record cannot stand in
            _copy_run(run_dir, target)
            restored.append(target)
    return restored


def _copy_run(run_dir: Path, target: Path) -> None:
    """The run's small files into `target`, which may already hold a prepared `prep`."""
    copy_into(_run_files(run_dir), target, last=("config.yaml", "decode.json"))
