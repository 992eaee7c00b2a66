"""Run from the repository root:

    python -P experiments/results/document-models/encode-ahead-ab.py MODEL_DIR [fp32|int8] [ROUNDS]

A B in one process: the 2-to-2 model's test split as documents, encoded wave by wave (False)
and up front (True, ctxnmt.decoding.ahead), one thread, rounds alternating."""
import sys, time, torch, statistics as st
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[3]))
from ctxnmt.data.corpus import read_lines
from ctxnmt.decoding import translator as tr
from ctxnmt.decoding.translator import Translator
torch.set_num_threads(1)
T = Translator.load(sys.argv[1])
if len(sys.argv) > 2: T.use_precision(sys.argv[2])
lines = read_lines('data/bible/test.es'); ids = read_lines('data/bible/test.doc')
T.translate(lines[:20], beam=5, doc_ids=ids[:20])
real = tr.EncodedAhead
res, outs = {}, {}
for rep in range(int(sys.argv[3]) if len(sys.argv) > 3 else 3):
    for on in (False, True):
        tr.EncodedAhead = real if on else (lambda *a, **k: None)
        s = time.perf_counter()
        o = T.translate(lines, beam=5, doc_ids=ids)
        res.setdefault(on, []).append(time.perf_counter() - s); outs[on] = [(t.text, t.score) for t in o]
tr.EncodedAhead = real
for k, v in res.items(): print('up front' if k else 'wave by wave', ['%.2f' % x for x in v], 'median %.2f' % st.median(v))
print('outputs differing', sum(a[0] != b[0] for a, b in zip(outs[False], outs[True])),
      'max score difference %.2e' % max(abs(a[1] - b[1]) for a, b in zip(outs[False], outs[True])))
