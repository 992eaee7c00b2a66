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
from pathlib import Path

from ctxnmt.errors import DataError
from ctxnmt.training.log import Validation, read_starts, read_validations
from ctxnmt.utils.io import atomic_write


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
