"""A throwaway A/B (2026-11-30): float32 search steps of fewer than 16 rows through log_softmax then topk
(A, shipped), a vocabulary-major product into the column kernel (B), or a row-major product into
the row kernel (C), alternating A B C in one process, one thread, beside a training.

    python fp32-small-rows-ab.py MODEL_DIR {sent|doc} ROUNDS

Output: fp32-small-rows-ab.txt.  Not shipped: no faster."""
import collections, sys, time, torch
from pathlib import Path
ROOT = str(Path(__file__).resolve().parents[4])
sys.path.insert(0, ROOT)
from ctxnmt.data.corpus import read_lines
from ctxnmt.decoding.translator import Translator
from ctxnmt.models import functional as Fn
import ctxnmt.models.nmt as nmt
torch.set_num_threads(1)
tr = Translator.load(sys.argv[1])
lines = read_lines(ROOT + '/data/bible/test.es'); ids = read_lines(ROOT + '/data/bible/test.doc')
if sys.argv[2] == 'sent': ids = None
shipped = Fn.top_log_softmax
def col(x, w, b, k):
    if torch.is_grad_enabled() or x.size(0) >= 16: return shipped(x, w, b, k)
    return torch.ops.ctxnmt.log_softmax_topk(torch.mm(w, x.t()), b.contiguous(), k)
def row(x, w, b, k):
    if torch.is_grad_enabled() or x.size(0) >= 16: return shipped(x, w, b, k)
    return torch.ops.ctxnmt.row_log_softmax_topk(torch.mm(x, w.t()), b.contiguous(), k)
V = {'A': shipped, 'B': col, 'C': row}
tr.translate(lines[:10], beam=5, doc_ids=ids[:10] if ids else None)
res = collections.defaultdict(list); outs = {}
for _ in range(int(sys.argv[3])):
    for v, f in V.items():
        nmt.top_log_softmax = f
        t = time.perf_counter(); out = tr.translate(lines, beam=5, doc_ids=ids); res[v].append(round(time.perf_counter() - t, 2))
        outs[v] = [o.text for o in out]
print(dict(res), 'same B', sum(a == b for a, b in zip(outs['A'], outs['B'])), 'same C', sum(a == b for a, b in zip(outs['A'], outs['C'])))
