"""Training throughput of 1 process × 2 threads against 2 processes × 1 thread (gloo), interleaved.

    python benchmarks/distributed.py [--config configs/rnnsearch-small.yaml] [--updates 20]
        [--rounds 2] [--set KEY=VALUE …]

Both settings run `ctxnmt train` on the same config, data and batches (the 2-process
run deals each update's batch to its ranks, so both make the same updates) for
`--updates` updates, and report target tokens per second of training time as the
trainer records it in done.json (validation excluded).  Runs alternate A B, B A, … so
that the machine's slow spells hit both alike; the ratio is of the medians.  The
data is prepared once and copied into each run's directory.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = {"1 process x 2 threads": (1, 2), "2 processes x 1 thread": (2, 1)}


def run(config: str, overrides: list[str], prep: Path, model_dir: Path, nproc: int, threads: int,
        updates: int) -> float:
    shutil.copytree(prep, model_dir / "prep")
    settings = [*overrides, f"model_dir={model_dir}", f"training.threads={threads}", f"training.max_updates={updates}",
                "training.max_minutes=0", "training.valid_every=100000", "training.valid_bleu=false",
                "training.valid_max_sents=8", "training.log_every=100000"]
    command = [sys.executable, "-m", "ctxnmt", "train", config, "--quiet", "--nproc", str(nproc)]
    subprocess.run(command + [a for s in settings for a in ("--set", s)], check=True)
    done = json.loads((model_dir / "done.json").read_text())
    return done["target_tokens_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "rnnsearch-small.yaml"))
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    from benchmarks.common import prepared_data
    from ctxnmt.config import load_config

    cfg = load_config(args.config, args.overrides)
    prepared_data(cfg)  # points cfg.model_dir at the shared prepared copy
    prep = Path(cfg.model_dir) / "prep"
    rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="ctxnmt-bench-dist-") as tmp:
        for r in range(args.rounds):
            order = list(SETTINGS) if r % 2 == 0 else list(reversed(SETTINGS))
            for name in order:
                nproc, threads = SETTINGS[name]
                model_dir = Path(tmp) / f"{r}-{nproc}"
                rate = run(args.config, args.overrides, prep, model_dir, nproc, threads, args.updates)
                rates[name].append(rate)
                print(f"round {r + 1}, {name}: {rate:,.0f} target tok/s", file=sys.stderr)
    print(f"{args.updates} updates of {Path(args.config).name} per run, {args.rounds} rounds, interleaved")
    print("| setting | target tok/s (median) | runs |")
    print("|---|---|---|")
    for name, values in rates.items():
        print(f"| {name} | {statistics.median(values):,.0f} | {', '.join(f'{v:,.0f}' for v in values)} |")
    one, two = (statistics.median(rates[name]) for name in SETTINGS)
    print(f"ratio (2 processes x 1 thread) / (1 process x 2 threads): {two / one:.3f}")


if __name__ == "__main__":
    main()
