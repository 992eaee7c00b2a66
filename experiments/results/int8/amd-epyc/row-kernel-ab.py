"""A throwaway A/B (issue 64, 2026-11-30): int8 search with the candidates step's log-softmax
and top-k read from the int8 product's row-major logits by the row kernel (B, shipped) against
the path before (A: the logits transposed into the vocabulary-major kernel at 16 rows or more,
log_softmax then topk below), alternating A B in one process, one thread.

    python row-kernel-ab.py MODEL_DIR {sent|doc} ROUNDS

Output: row-kernel-ab.txt."""
import collections
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
from ctxnmt.data.corpus import read_lines  # noqa: E402
from ctxnmt.decoding.translator import Translator  # noqa: E402
from ctxnmt.models import functional as Fn, int8  # noqa: E402

torch.set_num_threads(1)
tr = Translator.load(sys.argv[1])
tr.use_precision("int8")
lines = read_lines(ROOT / "data/bible/test.es")
ids = read_lines(ROOT / "data/bible/test.doc") if sys.argv[2] == "doc" else None
shipped = Fn.top_log_softmax


def before(x, weight, bias, k):
    if int8.serves(x, weight) and x.size(0) >= 16 and Fn._fusable(x, weight, bias):
        return torch.ops.ctxnmt.log_softmax_topk(int8.linear(x, weight).t().contiguous(), bias.contiguous(), k)
    if int8.serves(x, weight):
        return Fn.step_log_softmax(x, weight, bias).topk(k, dim=-1)
    return shipped(x, weight, bias, k)


def use(variant):
    chosen = before if variant == "A" else shipped
    for module in list(sys.modules.values()):
        if module is not None and module is not Fn and getattr(module, "top_log_softmax", None) in (before, shipped):
            module.top_log_softmax = chosen
    Fn.top_log_softmax = chosen


tr.translate(lines[:10], beam=5, doc_ids=ids[:10] if ids else None)
seconds, outs = collections.defaultdict(list), {}
for _ in range(int(sys.argv[3])):
    for variant in "AB":
        use(variant)
        start = time.perf_counter()
        out = tr.translate(lines, beam=5, doc_ids=ids)
        seconds[variant].append(time.perf_counter() - start)
        outs[variant] = [o.text for o in out]
print(sys.argv[1], sys.argv[2], {v: [round(s, 2) for s in runs] for v, runs in seconds.items()},
      "same outputs:", sum(a == b for a, b in zip(outs["A"], outs["B"])), "of", len(outs["A"]))
