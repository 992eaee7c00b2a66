"""Forcing a 2-to-2 model through its target prefixes, three ways side by side in one process on
the same batch:

  begun rows   as shipped (`NMTModel._forced_steps`): `Decoder.forced_step` (no deep output, no
               c_t where the summary does not read it, GRU_1's input terms in one product) over
               only the rows whose prefix has begun
  every row    `forced_step` over every row, a row's state kept until its prefix begins (the
               schedule before)
  whole steps  full search steps, readout included, over every row

    python benchmarks/forced_prefix.py runs/…/concat-2to2/seed1 [--sentences 24] [--repeats 5]

The batch is a wave as `translate` makes one: the first --sentences documents' second verses of
the test split, each reading its first verse and that verse's reference translation as its
prefix, its encoder side prepared for a beam of --beam as search prepares it (with K > 1 GRU_2's
input terms are formed per annotation, and a step forms c_t only for the readout).  The ways
must reach the same decoder states to float rounding (products of fewer rows may round
otherwise in CPU BLAS; the largest difference is printed); the median time of each and the
ratios are printed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def word_by_word(model, enc, whole: bool = True):
    """The prefix read one word a step over every row, a row's state kept until its prefix
    begins: by whole search steps, readout included, or (`whole` false) by `forced_step`, the
    schedule before forcing stepped only the begun rows."""
    prefix = enc.part("prefix")
    ids, lens = prefix["ids"], prefix["mask"].sum(1).long()
    import torch

    P = ids.size(1)
    ids = ids.gather(1, (torch.arange(P) - (P - lens).unsqueeze(1)).clamp(min=0))  # right-aligned
    start = model.start.expand(ids.size(0), -1)
    state = model.decoder.init_state(enc, 1)
    embed = model.context_reader.embed_target  # the break's embedding too
    rows, width = torch.arange(ids.size(0)), enc["src_mask"].size(1)
    for t in range(P):
        begins = (P - lens) == t
        emb = start if t == 0 else torch.where(begins.unsqueeze(1), start, embed(model.tgt_emb, ids[:, t - 1]))
        if whole:
            _, stepped, _ = model.decoder.step(enc, state, emb, model.decoder.word_input(emb))
        else:
            stepped = model.decoder.forced_step(enc, state, emb, model.decoder.word_input(emb))
        # a begun row's stepped state, another's kept: row r of the two stacked, or row B + r
        state = stepped.concat(state, width).select(torch.where(t >= P - lens, rows, rows + len(rows)))
    return state


def main(argv=None) -> int:
    import torch

    from ctxnmt.data.batching import pad, pad_context
    from ctxnmt.data.corpus import read_lines
    from ctxnmt.decoding.translator import Translator

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a 2-to-2 model directory")
    p.add_argument("--data", default="data/bible")
    p.add_argument("--sentences", type=int, default=24)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--beam", type=int, default=5, help="the beam the encoder side is prepared for (as search's)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    tr = Translator.load(args.model)
    model, data = tr.model, Path(args.data)
    src_lang, tgt_lang = tr.config.data.src_lang, tr.config.data.tgt_lang
    src, tgt = read_lines(data / f"test.{src_lang}"), read_lines(data / f"test.{tgt_lang}")
    docs = read_lines(data / "test.doc")
    firsts = [i for i in range(len(docs) - 1) if (i == 0 or docs[i - 1] != docs[i]) and docs[i + 1] == docs[i]]
    firsts = firsts[: args.sentences]

    def ids(line, side, vocab):
        return vocab.encode(tr.preprocessor.encode(line, side), add_eos=side == "tgt")

    sources = [ids(src[i + 1], "src", tr.src_vocab) for i in firsts]
    context = [[ids(src[i], "src", tr.src_vocab)] for i in firsts]
    targets = [[ids(tgt[i], "tgt", tr.tgt_vocab)] for i in firsts]
    s, mask = pad(sources)
    with torch.no_grad():
        enc = model.encode(s, mask, pad_context(context, targets=targets), args.beam)
        forced, whole = model.init_state(enc, 1), word_by_word(model, enc)
        # forcing steps only the rows whose prefix has begun, whole steps every row: products of
        # fewer rows may round otherwise in CPU BLAS (NMTModel._forced_steps)
        gap = max(float((forced[k] - whole[k]).abs().max()) for k in whole)
        assert gap <= 1e-4, f"the two ways reached different states (max |difference| {gap:.1e})"
        times = {"begun rows": [], "every row": [], "whole steps": []}
        for _ in range(args.repeats):
            for name, run in (("begun rows", lambda: model.init_state(enc, 1)),
                              ("every row", lambda: word_by_word(model, enc, whole=False)),
                              ("whole steps", lambda: word_by_word(model, enc))):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    width = int(enc.part("prefix")["mask"].sum(1).max())
    print(f"{len(firsts)} sentences, prefixes of up to {width} words, beam {args.beam}, {args.threads} threads, "
          f"{args.repeats} runs each; the same states to {gap:.1e}")
    for name, values in times.items():
        print(f"{name:12s} {statistics.median(values) * 1000:8.1f} ms")
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"begun rows / whole steps: {median['begun rows'] / median['whole steps']:.2f}x; "
          f"begun rows / every row: {median['begun rows'] / median['every row']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
