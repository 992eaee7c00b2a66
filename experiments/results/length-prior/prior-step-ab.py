"""A throwaway A/B (issue 64, 2026-11-30): search under a length-ratio prior with each row's
top 2K and </s> read from a top-k kernel's log Z (B, shipped: `top_log_softmax_and_word`)
against the path before (A: the whole (R, V) `step_log_softmax`, then topk and the </s>
column), alternating A B in one process, in float32 and in int8, one thread.

    python prior-step-ab.py MODEL_DIR ROUNDS

Output: prior-step-ab.txt."""
import collections
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from ctxnmt.data.corpus import read_lines  # noqa: E402
from ctxnmt.decoding.translator import Translator  # noqa: E402
from ctxnmt.models import functional as Fn, nmt  # noqa: E402

torch.set_num_threads(1)
tr = Translator.load(sys.argv[1])
lines = read_lines(ROOT / "data/bible/test.es")
shipped = Fn.top_log_softmax_and_word


def before(x, weight, bias, k, word):
    logp = Fn.step_log_softmax(x, weight, bias)
    return *logp.topk(k, dim=-1), logp[:, word]


for precision in ("fp32", "int8"):
    tr.use_precision(precision)
    tr.translate(lines[:10], beam=5)
    seconds, outs = collections.defaultdict(list), {}
    for _ in range(int(sys.argv[2])):
        for variant in "AB":
            nmt.top_log_softmax_and_word = before if variant == "A" else shipped
            start = time.perf_counter()
            outs[variant] = [t.text for t in tr.translate(lines, beam=5)]
            seconds[variant].append(round(time.perf_counter() - start, 2))
    nmt.top_log_softmax_and_word = shipped
    same = sum(a == b for a, b in zip(outs["A"], outs["B"]))
    ratio = sorted(seconds["B"])[len(seconds["B"]) // 2] / sorted(seconds["A"])[len(seconds["A"]) // 2]
    print(f"{sys.argv[1]} {precision} seconds {dict(seconds)} B/A median time {ratio:.3f}; "
          f"same outputs: {same} of {len(lines)}", flush=True)
