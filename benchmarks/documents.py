"""Translating documents with a model that reads its own previous translations (2-to-2):
sentences per second against a sentence model, side by side in one run.

    python benchmarks/documents.py --document runs/…/concat-2to2/seed1 \
        [--sentence runs/…/baseline/seed1] [--split test] [--repeats 3] [--threads 2]

A 2-to-2 model translates a document's sentence t after its sentence t − 1, so `translate`
advances all documents together (waves of one sentence per document); the sentence model
translates the same lines in length-sorted batches.  Each model translates the split
--repeats times, alternating A B A B, and the median rate of each is reported with their
ratio.  Without --sentence, the sentence-level rate is the 2-to-2 model's own on the lines
without document ids (no context, no waves): the same weights and output lengths, so the
ratio is what the waves and the prefixes cost.  Last, an untimed run of each counts the search's
steps and the rows they held, and the decoder steps that forced prefixes (not search steps).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(translator, lines, doc_ids, beam: int) -> tuple[float, int]:
    start = time.perf_counter()
    out = translator.translate(lines, beam=beam, doc_ids=doc_ids)
    return time.perf_counter() - start, sum(len(t.tokens) for t in out)


def search_steps(translator, lines, doc_ids, beam: int) -> tuple[int, int, int, int]:
    """The search's steps and the rows they held over one untimed translation, and the decoder
    steps that forced target prefixes and the rows they held: the model's search step (`step_candidates`, or
    `step_candidates_with_end` under a length-ratio prior) and its decoder's `forced_step` counted as they run (a model
    directory, not an ensemble)."""
    model, counts = translator.model, [0, 0, 0, 0]

    def counted(method):
        def step(enc, state, prev, *rest):
            out = method(enc, state, prev, *rest)
            counts[0], counts[1] = counts[0] + 1, counts[1] + out[0].size(0)
            return out
        return step

    def forced(method):
        def step(enc, state, prev_emb, *rest):
            counts[2], counts[3] = counts[2] + 1, counts[3] + prev_emb.size(0)
            return method(enc, state, prev_emb, *rest)
        return step

    model.step_candidates = counted(model.step_candidates)
    model.step_candidates_with_end = counted(model.step_candidates_with_end)
    model.decoder.forced_step = forced(model.decoder.forced_step)
    try:
        translator.translate(lines, beam=beam, doc_ids=doc_ids)
    finally:  # the classes' methods again
        del model.step_candidates, model.step_candidates_with_end, model.decoder.forced_step
    return tuple(counts)


def main(argv=None) -> int:
    import torch

    from ctxnmt.data.corpus import read_lines
    from ctxnmt.decoding.translator import Translator

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--document", required=True, help="a 2-to-2 (or any document) model directory")
    p.add_argument("--sentence", help="a sentence model directory (default: the document model without ids)")
    p.add_argument("--data", default="data/bible", help="the corpus directory (default %(default)s)")
    p.add_argument("--split", default="test")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    document = Translator.load(args.document)
    sentence = Translator.load(args.sentence) if args.sentence else document
    src_lang = document.config.data.src_lang
    lines = read_lines(Path(args.data) / f"{args.split}.{src_lang}")
    doc_ids = read_lines(Path(args.data) / f"{args.split}.doc")
    runs = {"sentence": (sentence, None if not args.sentence else doc_ids), "document": (document, doc_ids)}
    rates: dict[str, list[float]] = {name: [] for name in runs}
    tokens: dict[str, int] = {}
    timed(document, lines[:20], doc_ids[:20], args.beam)  # warm-up: kernels, word tables
    for _ in range(args.repeats):
        for name, (translator, ids) in runs.items():
            seconds, tokens[name] = timed(translator, lines, ids, args.beam)
            rates[name].append(len(lines) / seconds)
    print(f"{len(lines)} sentences of {args.split}, {len(set(doc_ids))} documents, beam {args.beam}, "
          f"{args.threads} threads, {args.repeats} runs each (A B A B)")
    for name in runs:
        print(f"{name:9s} {statistics.median(rates[name]):7.2f} sentences/s (runs: "
              f"{', '.join(f'{r:.2f}' for r in rates[name])}), {tokens[name]} output tokens")
    ratio = statistics.median(rates["document"]) / statistics.median(rates["sentence"])
    print(f"document / sentence: {ratio:.2f}x")
    for name, (translator, ids) in runs.items():  # untimed: what the rates are made of
        steps, rows, forced, forced_rows = search_steps(translator, lines, ids, args.beam)
        print(f"{name:9s} {steps} search steps, {rows / steps:.1f} rows a step on average; "
              f"{forced} decoder steps forcing target prefixes"
              + (f", {forced_rows / forced:.1f} rows a step" if forced else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
