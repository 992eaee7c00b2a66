"""A B in one process (2026-11-30, AMD EPYC, one thread): the 2-to-2 model translating the test split as
documents and as sentences, with the packed float32 products (ctxnmt.models.packed) switched off (False)
and on (True), three rounds alternating; then the document / sentence ratio of each.

    python -P packed-ab.py runs/exp/document-models/systems/concat-2to2/seed1 1 doc
"""
import sys, time, torch
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[3]))
from ctxnmt.data.corpus import read_lines
from ctxnmt.decoding.translator import Translator
from ctxnmt.models import packed
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
T = Translator.load(sys.argv[1])
lines = read_lines('data/bible/test.es'); ids = read_lines('data/bible/test.doc')
docs = len(sys.argv) > 3 and sys.argv[3] == 'doc'
T.translate(lines[:20], beam=5, doc_ids=ids[:20] if docs else None)
res = {}
outs = {}
for rep in range(3):
    for on in (False, True):
        packed.AVAILABLE = on
        for mode in (('doc', 'sent') if docs else ('sent',)):
            s = time.perf_counter()
            out = T.translate(lines, beam=5, doc_ids=ids if mode == 'doc' else None)
            res.setdefault((on, mode), []).append(time.perf_counter() - s)
            outs[(on, mode)] = [t.text for t in out]
for k, v in res.items(): print(k, ['%.2f' % x for x in v])
for mode in (('doc', 'sent') if docs else ('sent',)):
    print(mode, 'same outputs', outs[(False, mode)] == outs[(True, mode)], sum(a != b for a, b in zip(outs[(False, mode)], outs[(True, mode)])))
if docs:
    import statistics as st
    for on in (False, True):
        print('packed' if on else 'before', 'doc/sent ratio %.3f' % (st.median(res[(on, 'sent')]) / st.median(res[(on, 'doc')])))
