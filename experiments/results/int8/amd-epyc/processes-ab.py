"""A throwaway measurement (issue 64, 2026-11-30): one search of two threads (1x2) against two
forked processes of one thread each, each translating every other sentence by length (2 procs),
float32 and int8, three rounds alternating, the machine otherwise idle.  Not a feature: forking
a process that may hold other threads (the server, training) needs care; see docs/speed-log.md.

    python processes-ab.py MODEL_DIR
"""
import sys, time, torch, multiprocessing as mp, statistics
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[4]))
from ctxnmt.data.corpus import read_lines
from ctxnmt.decoding.translator import Translator
lines = read_lines(str(__import__('pathlib').Path(__file__).resolve().parents[4] / 'data/bible/test.es'))
torch.set_num_threads(1)
T = Translator.load(sys.argv[1])
order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
halves = [order[0::2], order[1::2]]
def work(args):
    precision, h = args
    torch.set_num_threads(1)
    T.use_precision(precision)
    return [t.text for t in T.translate([lines[i] for i in halves[h]], beam=5)]
if __name__ == '__main__':
    ctx = mp.get_context('fork')
    res = {}
    for rep in range(3):
        for p in ('fp32', 'int8'):
            T.use_precision(p); torch.set_num_threads(2)
            s = time.perf_counter(); T.translate(lines, beam=5); res.setdefault((p, '1x2'), []).append(len(lines) / (time.perf_counter() - s))
            torch.set_num_threads(1)
            s = time.perf_counter()
            with ctx.Pool(2) as pool:
                outs = pool.map(work, [(p, 0), (p, 1)])
            res.setdefault((p, '2 procs'), []).append(len(lines) / (time.perf_counter() - s))
    for k, v in res.items(): print(k, [round(x, 1) for x in v], round(statistics.median(v), 1))
    for m in ('1x2', '2 procs'):
        print(m, 'int8/fp32', round(statistics.median(res[('int8', m)]) / statistics.median(res[('fp32', m)]), 2))
