"""int8 against float32 search on the CPU (decoding.precision, issue 64): sentences per
second and sacreBLEU of the same model's translations of a split, side by side in one run.

    python benchmarks/int8.py runs/demo [MODEL_DIR …] [--split test] [--beam 5] [--repeats 3] \
        [--threads 2] [--workers 1] [--json out.json]

Each model translates the split --repeats times in each precision, alternating fp32 int8
fp32 int8 (a shared machine drifts within a minute), with the model directory's decoding
settings; the median rate of each, their ratio, and the BLEU of each (the outputs are the
same at every repeat) are reported.  A document model (one that reads context) is given
the split's document ids.  Also reported: the time the first int8 translation spends
quantising the weights (fbgemm's packing, at first use), measured on two sentences before
and after.  --parts also times the model's own parts on one batch of the split's first 64
sentences (process CPU time, 20 calls each, alternating): the encoder side (`encode`, with
the per-sentence products beam search shares), one full step (`step`: log-probabilities
over the vocabulary), one candidates step (`step_candidates`: the fused top-k) and one with
every row's </s> besides (`step_candidates_with_end`: a length-ratio prior's step), so that
what int8 speeds up can be told from what it leaves in float32.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(translator, lines, doc_ids, beam: int) -> tuple[float, list[str]]:
    start = time.perf_counter()
    out = translator.translate(lines, beam=beam, doc_ids=doc_ids)
    return time.perf_counter() - start, [t.text for t in out]


def quantising_seconds(translator, lines, doc_ids, beam: int) -> float:
    """The first int8 call's extra time over the second on the same two lines: the packing."""
    translator.use_precision("int8")
    first, _ = timed(translator, lines[:2], doc_ids and doc_ids[:2], beam)
    second, _ = timed(translator, lines[:2], doc_ids and doc_ids[:2], beam)
    return first - second


def parts(translator, lines, beam: int) -> dict:
    """Milliseconds of process CPU time per call of encode, step and step_candidates, by precision."""
    import torch

    from ctxnmt.data.batching import pad
    from ctxnmt.decoding.translator import search_precision

    model = translator.model
    ids = [translator.src_vocab.encode(translator.preprocessor.encode(line, "src"), add_eos=False)
           for line in lines[:64]]
    src, mask = pad([i for i in ids if i])
    prev = torch.arange(src.size(0) * beam) % (model.vocab_size - 4) + 4
    out: dict[str, list[float]] = {}
    for _ in range(2):
        for precision in ("fp32", "int8"):
            dec = translator.config.decoding.__class__(**{**vars(translator.config.decoding), "precision": precision})
            with torch.no_grad(), search_precision(dec, "cpu"):
                enc = model.encode(src, mask, None, beam)
                state = model.init_state(enc, beam)
                calls = {"encode": lambda: model.encode(src, mask, None, beam),
                         "step": lambda: model.step(enc, state, prev),
                         "step_candidates": lambda: model.step_candidates(enc, state, prev, 2 * beam),
                         "step_candidates_with_end": lambda: model.step_candidates_with_end(enc, state, prev,
                                                                                            2 * beam)}
                for name, call in calls.items():
                    call()
                    start = time.process_time()
                    for _ in range(20):
                        call()
                    out[f"{precision}_{name}_ms"] = (time.process_time() - start) / 20 * 1e3
    return out


def measure(model_dir: str, lines, refs, doc_ids, args) -> dict:
    from ctxnmt.decoding.translator import Translator
    from ctxnmt.evaluation.metrics import bleu

    translator = Translator.load(model_dir)
    translator.use_workers(args.workers)
    ids = doc_ids if translator.document_sents else None
    packing = quantising_seconds(translator, lines, ids, args.beam)
    rates: dict[str, list[float]] = {"fp32": [], "int8": []}
    outputs: dict[str, list[str]] = {}
    for precision in rates:  # warm-up of each: word tables, kernels
        translator.use_precision(precision)
        timed(translator, lines[:20], ids and ids[:20], args.beam)
    for _ in range(args.repeats):
        for precision in rates:
            translator.use_precision(precision)
            seconds, outputs[precision] = timed(translator, lines, ids, args.beam)
            rates[precision].append(len(lines) / seconds)
    row = {"model": model_dir, "sentences": len(lines), "beam": args.beam, "documents": ids is not None,
           "workers": args.workers, "threads": args.threads,
           "quantise_s": packing}
    for precision, runs in rates.items():
        row[f"{precision}_sents_s"] = statistics.median(runs)
        row[f"{precision}_runs"] = runs
        row[f"{precision}_bleu"] = bleu(outputs[precision], refs).value
    row["ratio"] = row["int8_sents_s"] / row["fp32_sents_s"]
    row["bleu_difference"] = row["int8_bleu"] - row["fp32_bleu"]
    row["same_outputs"] = sum(a == b for a, b in zip(outputs["fp32"], outputs["int8"]))
    if args.parts and not translator.document_sents:
        row["parts"] = parts(translator, lines, args.beam)
    return row


def main(argv=None) -> int:
    import torch

    from ctxnmt.data.corpus import read_lines

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dirs", nargs="+", metavar="MODEL_DIR")
    p.add_argument("--data", default="data/bible", help="the corpus directory (default %(default)s)")
    p.add_argument("--split", default="test")
    p.add_argument("--src", default="es")
    p.add_argument("--tgt", default="en")
    p.add_argument("--sentences", type=int, default=0, help="the split's first N lines (default: all)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workers", type=int, default=1,
                   help="searches side by side (decoding.workers), each with --threads threads")
    p.add_argument("--parts", action="store_true",
                   help="also time encode, step and step_candidates alone (sentence models)")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    base = Path(args.data) / args.split
    lines, refs = read_lines(f"{base}.{args.src}"), read_lines(f"{base}.{args.tgt}")
    doc_ids = read_lines(f"{base}.doc") if Path(f"{base}.doc").is_file() else None
    if args.sentences:
        lines, refs, doc_ids = lines[: args.sentences], refs[: args.sentences], doc_ids and doc_ids[: args.sentences]
    rows = [measure(d, lines, refs, doc_ids, args) for d in args.model_dirs]
    print(f"{'model':<48} {'fp32 sent/s':>11} {'int8 sent/s':>11} {'ratio':>6} {'fp32 BLEU':>9} {'int8 BLEU':>9} "
          f"{'Δ BLEU':>7} {'same':>6} {'quantise':>8}")
    for r in rows:
        print(f"{r['model'][-48:]:<48} {r['fp32_sents_s']:>11.2f} {r['int8_sents_s']:>11.2f} {r['ratio']:>6.2f} "
              f"{r['fp32_bleu']:>9.2f} {r['int8_bleu']:>9.2f} {r['bleu_difference']:>+7.2f} "
              f"{r['same_outputs']:>6} {r['quantise_s']:>7.2f}s")
    for r in rows:
        if "parts" in r:
            p_ = r["parts"]
            print(f"{r['model'][-48:]}: " + ", ".join(
                f"{name} {p_[f'fp32_{name}_ms']:.1f} / {p_[f'int8_{name}_ms']:.1f} ms "
                f"(x{p_[f'fp32_{name}_ms'] / p_[f'int8_{name}_ms']:.2f})"
                for name in ("encode", "step", "step_candidates", "step_candidates_with_end"))
                + " (fp32 / int8, 64 sentences)")
    print(f"\n{args.split} split ({len(lines)} sentences; a document model with the split's document ids), "
          f"beam {args.beam}, "
          f"{args.workers} worker(s) of {torch.get_num_threads()} thread(s); the median of {args.repeats} runs each, "
          "alternating fp32 int8; "
          "'same': outputs identical to fp32's; 'quantise': the first int8 call's packing time")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
