"""Copy an experiment's small text results out of its run directory, to be committed.

Run directories hold checkpoints (tens of MB each) that never belong in git; the numbers
of a report, and everything needed to re-score or re-test them, are a few small files:
the report itself, each run's test output, scores, decoding record, effective config and
training log (its validations are the learning curve), and the significance results.  The
report lists them (report.json's `files`), so an export copies exactly what it reports.
Restoring copies a run's small files back into an experiment directory that lacks the
run, so that a report on a new machine keeps the committed rows without retraining them.
"""
from __future__ import annotations

from pathlib import Path

from ctxnmt.errors import DataError
from ctxnmt.lm.scoring import LINE_SCORES
from ctxnmt.utils.io import copy_into, read_json_object

REPORT_FILES = ("report.md", "report.csv", "report.json", "length-buckets.png")
RUN_FILES = ("config.yaml", "train.log", "done.json", "decode.json", "scores.json",
             "alignment.json",  # where `ctxnmt analyze alignment RUN -o RUN/alignment.json` was run
             LINE_SCORES, "results.json")  # a language model's
RUN_PATTERNS = ("test.hyp.*",)


def _run_files(directory: Path) -> list[Path]:
    files = [directory / name for name in RUN_FILES if (directory / name).is_file()]
    return files + sorted(p for pattern in RUN_PATTERNS for p in directory.glob(pattern) if p.is_file())


def export_results(root: Path, dest: Path) -> tuple[list[Path], list[Path]]:
    """Copy what experiment directory `root`'s report was computed from to `dest`, keeping
    the layout: the report, the small files of each run and ensemble it lists, its external
    outputs' scores and its significance results.  Returns the copies, and the run
    directories in `dest` that the report does not list (left in place: the report may lack
    them only because this machine does; delete them where their system was removed).

    A run the report leaves out (still training, trained under another config, or of a
    system no longer in the experiment) is not exported: a copy would be restored on a new
    machine as if it were one of the experiment's results.  Each run directory, and the
    significance and external directories, are swapped in whole, so no file of an earlier
    export stays among them (a test of a seed set since grown, an output since re-decoded);
    the report comes last, so an interrupted export never holds a report newer than its runs."""
    files = report_files(root)
    if dest.resolve() == root.resolve():  # swapping a run directory in whole would drop its checkpoints
        return [], []
    _refuse_training_directories(dest, files["runs"])
    copied = []
    for run in files["runs"]:
        sources = _run_files(root / run)
        copy_into(sources, dest / run, last=("decode.json", "config.yaml"), replace=True)
        copied += [dest / run / source.name for source in sources]
    for group in ("external", "significance"):
        sources = [root / name for name in files[group]]
        if sources or (dest / group).exists():
            copy_into(sources, dest / group, replace=True)
        copied += [dest / group / source.name for source in sources]
    reports = [root / name for name in REPORT_FILES if (root / name).is_file()]
    copy_into(reports, dest, last=("report.json",))
    copied += [dest / source.name for source in reports]
    reported = {dest / run for run in files["runs"]}
    unreported = [d for group in ("systems", "ensembles") for d in sorted((dest / group).glob("*/seed*"))
                  if d.is_dir() and d not in reported]
    return copied, unreported


def _refuse_training_directories(dest: Path, runs: list[str]) -> None:
    """An export swaps each run directory in whole: where DEST is another experiment's
    directory, that would delete its checkpoints."""
    for run in runs:
        for held in ("checkpoints", "prep"):
            if (dest / run / held).exists():
                raise DataError(f"{dest / run}: holds {held}/, a training's directory, not an export: "
                                "export somewhere else")


def report_files(root: Path) -> dict[str, list[str]]:
    """What `root`'s report.json says the report was computed from (paths relative to `root`)."""
    report = root / "report.json"
    if not report.is_file():
        raise DataError(f"{report}: no report to export (write one with --report first)")
    files = read_json_object(report).get("files")
    if files is None:
        raise DataError(f"{report}: lists no files (written by an earlier ctxnmt): write it again with --report")
    return files


def restore_results(source: Path, root: Path, kept: str = "decode.json") -> list[Path]:
    """Copy the small files of every run and ensemble that export `source`'s report lists into
    experiment directory `root` where that run is absent (no config.yaml there; an ensemble: no
    decode.json), each run directory appearing whole; returns the restored run directories.
    A run stands in only with its task's record `kept` (a translation's decode.json).  An
    export whose report predates its `files` list offers every run directory it holds."""
    if not (source / "report.json").is_file():
        raise DataError(f"{source}: not an exported experiment (no report.json there)")
    listed = read_json_object(source / "report.json").get("files")
    run_dirs = ([source / run for run in listed["runs"]] if listed is not None
                else [d for group in ("systems", "ensembles") for d in sorted((source / group).glob("*/seed*"))])
    restored = []
    for run_dir in run_dirs:
        relative = run_dir.relative_to(source)
        target = root / relative
        marker = "decode.json" if relative.parts[0] == "ensembles" else "config.yaml"
        if (target / marker).exists() or not (run_dir / kept).is_file():
            continue  # a local run wins; an export without its task's record cannot stand in
        # into `target`, which may already hold a prepared `prep`; config.yaml, by which a run
        # counts as present, last, after the decode.json it needs
        copy_into(_run_files(run_dir), target, last=("decode.json", "config.yaml"))
        restored.append(target)
    return restored

