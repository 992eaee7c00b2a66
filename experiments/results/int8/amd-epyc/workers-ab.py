"""A/B (issue 64, 2026-11-30): on the 2-core AMD EPYC, one search of two threads (A: the
default) against two searches side by side of one thread each (B: `decoding.workers: 2`), in
float32 and in int8, alternating A B in one process, the machine otherwise idle.

    python workers-ab.py MODEL_DIR ROUNDS

Output: workers-ab.txt."""
import collections
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
from ctxnmt.data.corpus import read_lines  # noqa: E402
from ctxnmt.decoding.translator import Translator  # noqa: E402

tr = Translator.load(sys.argv[1])
lines = read_lines(ROOT / "data/bible/test.es")
rates, outs = collections.defaultdict(list), {}
for precision in ("fp32", "int8"):
    tr.use_precision(precision)
    tr.translate(lines[:20], beam=5)
for _ in range(int(sys.argv[2])):
    for precision in ("fp32", "int8"):
        tr.use_precision(precision)
        for variant, workers, threads in (("A", 1, 2), ("B", 2, 1)):
            tr.use_workers(workers)
            torch.set_num_threads(threads)
            start = time.perf_counter()
            outs[precision, variant] = [t.text for t in tr.translate(lines, beam=5)]
            rates[precision, variant].append(round(len(lines) / (time.perf_counter() - start), 2))
for precision in ("fp32", "int8"):
    a, b = (statistics.median(rates[precision, v]) for v in "AB")
    same = sum(x == y for x, y in zip(outs[precision, "A"], outs[precision, "B"]))
    print(f"{sys.argv[1]} {precision}: A (1 search x 2 threads) {rates[precision, 'A']} sent/s, "
          f"B (2 searches x 1 thread) {rates[precision, 'B']}; B/A {b / a:.3f}; same outputs {same} of {len(lines)}")
for v in "AB":
    print(f"int8 / fp32 under {v}: {statistics.median(rates['int8', v]) / statistics.median(rates['fp32', v]):.2f}")
