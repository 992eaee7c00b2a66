"""Which length settings should ship?  Decodes a dev set with a grid of length options
(ctxnmt/decoding/length.py) and prints, per setting, BLEU, the length ratio (sacreBLEU's
hypothesis/reference length) and the share of outputs more than twice as long as their
reference in words: the runaway outputs a length limit is there to stop.

    python benchmarks/length_sweep.py runs/demo --src data/bible/dev.es --ref data/bible/dev.en \\
        --kinds power,wu --alphas 0.6,1.0,1.4 --betas 0,0.2 --max-len 2:10,1.5:5,data:5 [--block 0,3] [--beam 5] \\
        [--ratio-penalties 0,4 --ratios data,1.2] [--lines 1:1500] [--detokenise es:en] [--config-only] [--csv F]

The model is loaded once; every setting is one `Translator.translate` call with the
options given as overrides, so the first row, the model directory's own settings
("config"), is what `ctxnmt translate` does today.  `--max-len A:B` is a·|x| + b
(fairseq's --max-len-a/--max-len-b); `data:B` takes a from the training data
(`max_len_rule: data`).  The training data's target/source ratio quantiles (the a that
each would give) are printed first.  Choose on dev, report on test.

Out-of-domain text such as WMT's newstest2013 (../shared/reference-outputs/es-en/) comes
Moses-tokenised with its first letter lower-cased: `--detokenise es:en` detokenises the
source and the reference (sacremoses) and restores the first capital, so that the model
reads text as it reads the Bible and sacreBLEU scores detokenised text; `--lines 1:1500`
keeps lines 1–1500 (1-based, inclusive), e.g. one half to choose on and the other to report.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def max_lens(text: str) -> list[dict]:
    """'2:10,data:5' → the options of each a·|x| + b."""
    out = []
    for item in text.split(","):
        a, _, b = item.partition(":")
        if not b:
            raise SystemExit(f"--max-len: {item!r} is not A:B (e.g. 2:10 or data:5)")
        rule = {"max_len_rule": "data"} if a == "data" else {"max_len_rule": "fixed", "max_len_a": float(a)}
        out.append({**rule, "max_len_b": int(b)})
    return out


def grid(args) -> list[dict]:
    """Every combination of the options; kind none takes no α, so it appears once per β and limit."""
    settings = []
    for kind, alpha, beta, limit, block, prior in itertools.product(
            args.kinds.split(","), floats(args.alphas), floats(args.betas), max_lens(args.max_len),
            [int(n) for n in args.block.split(",") if n], priors(args.ratio_penalties, args.ratios)):
        options = {"length_penalty_kind": kind, "length_penalty": 0.0 if kind == "none" else alpha,
                   "coverage_penalty": beta, **limit, "block_ngram_repeat": block, **prior}
        if options not in settings:
            settings.append(options)
    return settings


def priors(penalties: str, ratios: str) -> list[dict]:
    """The length-ratio priors: λ 0 (off) once, else each λ with each r ('data': the training median)."""
    out = []
    for lam in floats(penalties):
        for r in ratios.split(",") if lam else ["data"]:
            rule = {"length_ratio_rule": "data"} if r == "data" else {"length_ratio_rule": "fixed", "length_ratio": float(r)}
            out.append({"length_ratio_penalty": lam, **rule})
    return out


def detokenise(lines: list[str], lang: str) -> list[str]:
    from sacremoses import MosesDetokenizer

    moses = MosesDetokenizer(lang=lang)
    out = [moses.detokenize(line.split()) for line in lines]
    return [line[:1].upper() + line[1:] for line in out]


def line_range(text: str) -> slice:
    first, _, last = text.partition(":")
    if not (first.isdigit() and last.isdigit() and 1 <= int(first) <= int(last)):
        raise SystemExit(f"--lines: {text!r} is not FIRST:LAST (1-based, e.g. 1:1500)")
    return slice(int(first) - 1, int(last))


def measure(translator, src: list[str], ref: list[str], beam: int | None, options: dict | None) -> dict:
    from ctxnmt.evaluation.metrics import bleu

    start = time.perf_counter()
    hyps = [t.text for t in translator.translate(src, beam=beam, length=options)]
    seconds = time.perf_counter() - start
    score = bleu(hyps, ref)
    pairs = [(len(h.split()), len(r.split())) for h, r in zip(hyps, ref) if r.strip()]
    runaway = sum(h > 2 * r for h, r in pairs) / max(1, len(pairs))
    # output words per source word, to set beside the training pairs' and the references' own
    per_source = sum(len(h.split()) for h in hyps) / max(1, sum(len(s.split()) for s in src))
    return {"bleu": score.value, "ratio": score.extra["ratio"], "over_2x": runaway, "out_per_src_word": per_source,
            "seconds": seconds}


def label(options: dict | None) -> dict:
    if options is None:
        return {"setting": "config"}
    a = "data" if options["max_len_rule"] == "data" else f"{options['max_len_a']:g}"
    block = f" block={options['block_ngram_repeat']}" if options.get("block_ngram_repeat") else ""
    prior = ""
    if options.get("length_ratio_penalty"):
        r = "data" if options["length_ratio_rule"] == "data" else f"{options['length_ratio']:g}"
        prior = f" λ={options['length_ratio_penalty']:g} r={r}"
    return {"setting": f"{options['length_penalty_kind']} α={options['length_penalty']:g} "
                       f"β={options['coverage_penalty']:g} max={a}·|x|+{options['max_len_b']}{block}{prior}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--src", required=True, help="source file (raw text, one sentence per line)")
    parser.add_argument("--ref", required=True, help="reference file (raw text)")
    parser.add_argument("--kinds", default="power,wu", help="length penalty kinds (default: %(default)s)")
    parser.add_argument("--alphas", default="0.6,1.0", help="α values (default: %(default)s)")
    parser.add_argument("--betas", default="0,0.2", help="coverage penalty β values (default: %(default)s)")
    parser.add_argument("--max-len", default="2:10,data:5", help="A:B limits, A may be 'data' (default: %(default)s)")
    parser.add_argument("--block", default="0",
                        help="block_ngram_repeat values, n > 0 blocks repeated n-grams (default: %(default)s)")
    parser.add_argument("--ratio-penalties", default="0",
                        help="λ values of the length-ratio prior, 0 = off (default: %(default)s)")
    parser.add_argument("--ratios", default="data",
                        help="its r values, output words per source word, or 'data' (default: %(default)s)")
    parser.add_argument("--beam", type=int, help="beam size (default: the model's config)")
    parser.add_argument("--max-sents", type=int, default=0, help="only the first N sentences (0: all)")
    parser.add_argument("--lines", help="only lines FIRST:LAST (1-based, inclusive)")
    parser.add_argument("--detokenise", metavar="SRC:TGT", help="Moses-detokenise source and reference first")
    parser.add_argument("--config-only", action="store_true", help="only the model directory's own settings")
    parser.add_argument("--csv", help="also write the table as CSV")
    args = parser.parse_args(argv)

    from ctxnmt.data.corpus import read_lines
    from ctxnmt.data.prepare import load_length_ratios
    from ctxnmt.decoding.translator import Translator
    from ctxnmt.errors import CtxnmtError

    src, ref = read_lines(args.src, allow_empty=True), read_lines(args.ref, allow_empty=True)
    if len(src) != len(ref):
        raise SystemExit(f"{args.src} has {len(src)} lines but {args.ref} has {len(ref)}")
    if args.lines:
        src, ref = src[line_range(args.lines)], ref[line_range(args.lines)]
    if args.max_sents:
        src, ref = src[:args.max_sents], ref[:args.max_sents]
    if args.detokenise:
        src_lang, _, tgt_lang = args.detokenise.partition(":")
        src, ref = detokenise(src, src_lang), detokenise(ref, tgt_lang or src_lang)
    translator = Translator.load(args.model_dir)
    ratios = load_length_ratios(Path(args.model_dir) / "prep")
    print("training target/source subword ratio quantiles (max_len_rule data takes 0.99): "
          + (", ".join(f"{q}: {r:.3f}" for q, r in ratios.items()) if ratios else "none recorded"))
    settings = [] if args.config_only else grid(args)
    try:
        for options in settings:  # every setting checked before the first decode
            translator.length_control(options)
    except CtxnmtError as err:
        raise SystemExit(f"length_sweep: {err}") from None
    rows = []
    words = sum(len(r.split()) for r in ref) / max(1, sum(len(s.split()) for s in src))
    print(f"reference words per source word: {words:.3f}")
    print("| setting | BLEU | length ratio | > 2× ref | output words per source word | seconds |\n"
          "|---|---|---|---|---|---|")
    for options in [None, *settings]:
        row = {**label(options), **measure(translator, src, ref, args.beam, options)}
        rows.append(row)
        print(f"| {row['setting']} | {row['bleu']:.2f} | {row['ratio']:.3f} | {100 * row['over_2x']:.1f}% "
              f"| {row['out_per_src_word']:.3f} | {row['seconds']:.1f} |", flush=True)
    best = max(rows, key=lambda r: r["bleu"])
    print(f"best BLEU: {best['setting']} ({best['bleu']:.2f}) on {len(src)} sentences")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
