"""How long `ctxnmt --version` and `ctxnmt --help` take, against importing torch alone.

    python benchmarks/cli_start.py [--rounds 5]

Each command runs in a fresh interpreter, alternating with `python -c "import torch"` so that
the machine's slow spells hit both alike; the medians and their ratio are printed.  The CLI
imports a command's family (and torch with it) only once the command is chosen, so both
should take a small fraction of torch's import (under 0.5 s; 3.9 s before issue 65).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "ctxnmt --version": [sys.executable, "-m", "ctxnmt", "--version"],
    "ctxnmt --help": [sys.executable, "-m", "ctxnmt", "--help"],
    "import torch": [sys.executable, "-c", "import torch"],
}


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.rounds):
        for name, command in CASES.items():
            times[name].append(seconds(command))
    torch_s = statistics.median(times["import torch"])
    for name, runs in times.items():
        median = statistics.median(runs)
        print(f"{name:18} median {median:.2f} s over {args.rounds} runs ({median / torch_s:.2f}x import torch)")


if __name__ == "__main__":
    main()
