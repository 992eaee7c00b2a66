"""`ctxnmt analyze curve`: dev-BLEU learning curves read from training logs.

A comparison measures what models learn only if it stops where the baseline has stopped
learning.  This reads every validation a run logged (`validation at update U (T target
tokens): ppl P, bleu B` in its train.log), plots dev BLEU against updates for one or more
runs, and says for each run how much its best dev BLEU still rose over the last quarter
of its updates:

    gain(U) = max{B_u : u ≤ U} − max{B_u : u ≤ 3U/4}

the running best, because the checkpoint selected is the best one so far.  A run whose
gain over its whole length is under a threshold (0.3 BLEU in docs/results.md's
protocol) has flattened.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from ctxnmt.errors import DataError
from ctxnmt.utils.io import atomic_write

_VALIDATION = re.compile(r"validation at update (\d+) \((\d+) target tokens\): (.*)$")
_START = re.compile(r"^\S+ \S+ (?:model|LM): [\d,]+ parameters")  # both trainers log their model at every start
_RESUME = re.compile(r"resumed from .* at update (\d+) \(")
NOT_INTERRUPTED = "none"  # what a run's interruptions read when its log shows no resume or restart


@dataclass
class Validation:
    update: int
    tokens: int
    scores: dict[str, float]


def training_log(model_dir: Path) -> tuple[Path, list[str]]:
    log = Path(model_dir) / "train.log"
    if not log.is_file():
        raise DataError(f"{log}: no training log (is {model_dir} a model directory?)")
    # a line cut mid-character by a kill must not hide the rest of the log
    return log, log.read_text(encoding="utf-8", errors="replace").splitlines()


def read_validations(model_dir: Path) -> list[Validation]:
    """Every logged validation of a run, in update order; a resumed run's repeats count once."""
    log, lines = training_log(model_dir)
    found: dict[int, Validation] = {}
    for number, line in enumerate(lines, 1):
        match = _VALIDATION.search(line)
        if match:
            try:
                scores = {k: float(v) for k, v in (item.split() for item in match.group(3).split(", "))}
            except ValueError:
                raise DataError(f"{log}, line {number}: unreadable validation scores {match.group(3)!r}") from None
            found[int(match.group(1))] = Validation(int(match.group(1)), int(match.group(2)), scores)
    if not found:
        raise DataError(f"{log}: no validation logged yet")
    return [found[u] for u in sorted(found)]


@dataclass
class Starts:
    """How often a run's training was started: `resumed_at` the updates it resumed from `last.pt`
    at; `fresh_restarts` the starts from update 0 after the first (no `last.pt` was there)."""
    resumed_at: list[int]
    fresh_restarts: int

    @property
    def interrupted(self) -> bool:
        return bool(self.resumed_at or self.fresh_restarts)

    def describe(self) -> str:
        parts = [f"resumed at {', '.join(f'{u:,}' for u in self.resumed_at)}"] if self.resumed_at else []
        if self.fresh_restarts:
            parts.append(f"restarted from update 0 {self.fresh_restarts}×")
        return "; ".join(parts) or NOT_INTERRUPTED


def read_starts(model_dir: Path) -> Starts:
    """The resumes and restarts a run's train.log shows.  A restart on another machine whose
    log did not survive leaves no trace here."""
    starts, resumed = 0, []
    for line in training_log(model_dir)[1]:
        starts += bool(_START.search(line))
        match = _RESUME.search(line)
        if match:
            resumed.append(int(match.group(1)))
    return Starts(resumed, max(starts - 1 - len(resumed), 0))


def best_up_to(curve: list[Validation], update: float, metric: str = "bleu") -> float | None:
    values = [v.scores[metric] for v in curve if v.update <= update and metric in v.scores]
    return max(values) if values else None


def last_quarter_gain(curve: list[Validation], metric: str = "bleu") -> float | None:
    """How much the running best rose over the last quarter of the run's updates."""
    end = curve[-1].update
    early = best_up_to(curve, 0.75 * end, metric)
    late = best_up_to(curve, end, metric)
    return None if early is None or late is None else late - early


def summary_line(name: str, curve: list[Validation], metric: str = "bleu") -> str:
    best = max((v for v in curve if metric in v.scores), key=lambda v: v.scores[metric], default=None)
    if best is None:
        return f"{name}: no dev {metric} logged"
    gain = last_quarter_gain(curve, metric)
    gain_text = "n/a (no validation before it)" if gain is None else f"{gain:+.2f}"
    return (f"{name}: {len(curve)} validations to update {curve[-1].update}; best dev {metric} "
            f"{best.scores[metric]:.2f} at update {best.update}; gain over the last quarter {gain_text}")


def logged_interruptions(model_dir: Path) -> str:
    """What the run's train.log shows of its resumes and restarts; `not recorded` for a run
    copied without its log."""
    try:
        return read_starts(model_dir).describe()
    except DataError:
        return "not recorded"


def interruptions(model_dir: Path) -> str:
    starts = read_starts(model_dir)
    return f" ({starts.describe()})" if starts.interrupted else ""


def write_csv(curves: dict[str, list[Validation]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["run", "update", "target_tokens", "ppl", "bleu"])
        for name, curve in curves.items():
            for v in curve:
                writer.writerow([name, v.update, v.tokens, v.scores.get("ppl", ""), v.scores.get("bleu", "")])


def plot(curves: dict[str, list[Validation]], path: Path, metric: str = "bleu") -> None:
    import matplotlib  # heavy to import, and only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, curve in curves.items():
        points = [(v.update, v.scores[metric]) for v in curve if metric in v.scores]
        ax.plot([u for u, _ in points], [b for _, b in points], marker="o", markersize=3, label=name)
    ax.set_xlabel("updates")
    ax.set_ylabel(f"dev {metric}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)


def run_names(dirs: list[str], names: list[str] | None) -> list[str]:
    if names and len(names) != len(dirs):
        raise DataError(f"--name was given {len(names)} times for {len(dirs)} model directories")
    return names or dirs


def cmd_curve(args) -> int:
    curves = {name: read_validations(Path(d)) for name, d in zip(run_names(args.model_dirs, args.name),
                                                                   args.model_dirs)}
    for (name, curve), directory in zip(curves.items(), args.model_dirs):
        print(summary_line(name, curve) + interruptions(Path(directory)))
    if args.csv:
        write_csv(curves, Path(args.csv))
    if args.plot:
        plot(curves, Path(args.plot))
    return 0


def register(sub) -> None:
    p = sub.add_parser("curve", help="dev-BLEU learning curves of training runs, and whether they have flattened",
                       description="Read the validations of each run's train.log; print the best dev BLEU and how "
                                   "much the running best rose over the last quarter of the run's updates; "
                                   "optionally plot the curves and write them as CSV.")
    p.add_argument("model_dirs", nargs="+", metavar="MODEL_DIR",
                   help="model directories of training runs (their train.log is read; a run still training too)")
    p.add_argument("--name", action="append", help="a label per model directory, in order (default: the path)")
    p.add_argument("--plot", metavar="F.png", help="dev BLEU against updates, one line per run")
    p.add_argument("--csv", metavar="F.csv", help="every validation: run, update, target tokens, ppl, bleu")
    p.set_defaults(func=cmd_curve)
