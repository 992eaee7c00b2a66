"""A throwaway A/B (issue 62, 2026-11-30): the softmax layer of a search step taken row-major
(x W_oᵀ) for fewer than 16 rows and, up to argv[3] rows, row-major before the fused log-softmax/top-k
kernel (A: the shipped vocabulary-major W_o xᵀ), alternating A B in one process.

    python layout-ab.py MODEL_DIR {all|long|sent} ROWS ROUNDS

Output of the runs in docs/speed-log.md: layout-ab.txt.  Dropped: not faster in the search."""
import sys, time, torch, collections
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from ctxnmt.data.corpus import read_lines
from ctxnmt.decoding.translator import Translator
from ctxnmt.models import functional as Fn
import torch.nn.functional as F
torch.set_num_threads(1)
tr = Translator.load(sys.argv[1])
lines = read_lines(ROOT / "data/bible/test.es"); ids = read_lines(ROOT / "data/bible/test.doc")
if sys.argv[2] == "long":
    big = collections.Counter(ids).most_common(1)[0][0]
    keep = [i for i, d in enumerate(ids) if d == big]
    lines, ids = [lines[i] for i in keep], [ids[i] for i in keep]
elif sys.argv[2] == "sent":
    ids = None
orig_sls, orig_tls = Fn.step_log_softmax, Fn.top_log_softmax
def sls_row(x, w, b):
    if torch.is_grad_enabled() or x.device.type != "cpu":
        return orig_sls(x, w, b)
    return torch.log_softmax(F.linear(x, w, b), dim=-1)
def tls_row(x, w, b, k):
    if x.size(0) < 16 or torch.is_grad_enabled():
        return sls_row(x, w, b).topk(k, dim=-1)
    if x.size(0) < int(sys.argv[3]):
        return torch.ops.ctxnmt.log_softmax_topk(torch.mm(x, w.t()).t().contiguous(), b.contiguous(), k)
    return orig_tls(x, w, b, k)
def use(v):
    import ctxnmt.models.nmt as nmt
    Fn.step_log_softmax, Fn.top_log_softmax = (orig_sls, orig_tls) if v == "A" else (sls_row, tls_row)
    for m in list(sys.modules.values()):
        if m and getattr(m, "top_log_softmax", None) in (orig_tls, tls_row) and m is not Fn:
            m.top_log_softmax = Fn.top_log_softmax
        if m and getattr(m, "step_log_softmax", None) in (orig_sls, sls_row) and m is not Fn:
            m.step_log_softmax = Fn.step_log_softmax
tr.translate(lines[:10], beam=5, doc_ids=ids[:10] if ids else None)
res = collections.defaultdict(list); outs = {}
for r in range(int(sys.argv[4])):
    for v in "AB":
        use(v); t = time.perf_counter(); out = tr.translate(lines, beam=5, doc_ids=ids); res[v].append(time.perf_counter() - t)
        outs[v] = [o.text for o in out] if hasattr(out[0], "text") else [o.tokens for o in out]
print(sys.argv[2:], {v: [round(x, 2) for x in s] for v, s in res.items()}, "same outputs:", sum(a == b for a, b in zip(outs["A"], outs["B"])), "of", len(outs["A"]))
