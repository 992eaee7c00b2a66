"""`ctxnmt translate` on a busy machine: OpenMP threads spinning, waiting passively (what the
console script chooses where the cores are busy) and one thread, side by side.

    python benchmarks/busy_threads.py MODEL_DIR [--busy 2] [--lines 200] [--rounds 3] [--doc-ids]

`--busy N` starts N processes that keep a core each busy (a bounded loop, as a training
would) for the whole run; `--busy 0` measures the free machine.  Each setting translates the
first --lines lines of the Bible test split in a fresh process, alternating A B C A B C, and
the medians are printed with each one's ratio to the spinning threads'.  The outputs must be
the same: how threads wait changes no arithmetic.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ctxnmt.utils.cores import WAIT_SETTINGS  # noqa: E402  (torch-free)

SETTINGS = {  # each one chosen by the user, so the console script leaves it alone
    "spinning (OMP_WAIT_POLICY=ACTIVE)": {"OMP_WAIT_POLICY": "ACTIVE"},
    "passive (OMP_WAIT_POLICY=PASSIVE)": {"OMP_WAIT_POLICY": "PASSIVE"},
    "one thread (OMP_NUM_THREADS=1)": {"OMP_NUM_THREADS": "1"},
}


def keep_busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def translate(model: str, src: Path, docs: Path | None, out: Path, extra: dict[str, str]) -> float:
    env = {k: v for k, v in os.environ.items() if k not in (*WAIT_SETTINGS, "OMP_NUM_THREADS")}
    command = [sys.executable, "-m", "ctxnmt", "translate", model, "-i", str(src), "-o", str(out)]
    command += ["--doc-ids", str(docs)] if docs else []
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env | extra, check=True, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a model directory")
    p.add_argument("--busy", type=int, default=2, help="cores kept busy meanwhile (default %(default)s)")
    p.add_argument("--lines", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--doc-ids", action="store_true", help="translate as documents (data/bible/test.doc)")
    p.add_argument("--data", default="data/bible")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = ROOT / args.data
        src, docs = tmp / "src", (tmp / "doc" if args.doc_ids else None)
        src.write_text("".join((data / "test.es").read_text().splitlines(True)[:args.lines]))
        if docs:
            docs.write_text("".join((data / "test.doc").read_text().splitlines(True)[:args.lines]))
        budget = 3600.0  # the busy loops end by themselves, whatever happens here
        busy = [multiprocessing.Process(target=keep_busy, args=(budget,), daemon=True) for _ in range(args.busy)]
        for process in busy:
            process.start()
        try:
            times: dict[str, list[float]] = {name: [] for name in SETTINGS}
            for _ in range(args.rounds):
                for i, (name, extra) in enumerate(SETTINGS.items()):
                    times[name].append(translate(args.model, src, docs, tmp / f"out{i}", extra))
        finally:
            for process in busy:
                process.terminate()
        outputs = {(tmp / f"out{i}").read_bytes() for i in range(len(SETTINGS))}
    print(f"{args.lines} lines{' as documents' if docs else ''}, {args.busy} busy core(s) of {os.cpu_count()}, "
          f"{args.rounds} rounds (A B C A B C), each a fresh `ctxnmt translate` process")
    spinning = statistics.median(next(iter(times.values())))
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{name:36s} {median:7.2f} s (runs: {', '.join(f'{s:.2f}' for s in seconds)}), "
              f"{spinning / median:.2f}x the spinning threads' speed")
    print("outputs: " + ("the same" if len(outputs) == 1 else "DIFFERENT"))
    return 0 if len(outputs) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
