"""The ``ctxnmt score`` command: metrics, significance and length analysis."""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from ctxnmt.data.corpus import check_same_length, read_lines
from ctxnmt.errors import CtxnmtError
from ctxnmt.evaluation.metrics import (
    METRICS,
    TOKENISED_BLEU_KEY,
    check_metrics,
    format_length_buckets,
    length_buckets,
    plot_length_buckets,
    score_all,
    tokenised_bleu_metric,
    tokenized_bleu,
)
from ctxnmt.evaluation.references import reference_warning
from ctxnmt.evaluation.replicates import TEST as REPLICATE_TEST
from ctxnmt.evaluation.replicates import seed_t_test, stratified_ar
from ctxnmt.evaluation.significance import TESTS, compare
from ctxnmt.utils.arguments import add_input, add_ref
from ctxnmt.utils.io import atomic_write, check_writable
from ctxnmt.utils.messages import to_stderr, warn


# argparse's own would end in the kinds of score a higher layer adds (`KIND ...`), as if one
# were required; each kind adds its own line (`score contrastive`).
USAGE = "%(prog)s --hyp FILE [--hyp FILE ...] -r FILE [--lang L] [options]"


def register(subparsers) -> None:
    """Add the ``score`` sub-command."""
    parser = subparsers.add_parser(
        "score", usage=USAGE,
        description="Score one or more systems against a reference: sacreBLEU, chrF and TER, and with --lang "
                    "tokenised BLEU (Moses-tokenised in the output's language). With several --hyp files and "
                    "--significance, every system is compared with the first one (the baseline).")
    # --hyp and --ref are checked in _validate, not by argparse: `score contrastive` needs neither
    parser.add_argument("--hyp", action="append", metavar="FILE",
                        help="detokenised system output; repeat for several systems (required)")
    add_ref(parser, "detokenised reference (required)")
    parser.add_argument("--metrics", default=",".join(METRICS),
                        help="comma-separated subset of %(default)s")
    parser.add_argument("--significance", choices=(*TESTS, REPLICATE_TEST),
                        help="paired test of each system against the first --hyp; stratified-ar: Clark et al.'s "
                             "approximate randomisation over replicates (with --replicates)")
    parser.add_argument("--replicates", type=int, default=1, metavar="R",
                        help="with --significance stratified-ar: each system is R consecutive --hyp files, its "
                             "runs with R seeds in the same seed order (the first R are the baseline's)")
    parser.add_argument("--samples", type=int, default=None, metavar="N",
                        help="bootstrap resamples / AR trials (default 1000 / 10000)")
    parser.add_argument("--seed", type=int, default=12345, help="RNG seed for resampling tests")
    parser.add_argument("--lang",
                        help="the output's language (en, es, …): adds tokenised BLEU to the metric bleu, which "
                             "Moses-tokenises --hyp and --ref in it (not with --tokenised)")
    add_input(parser, "source text, needed for --length-buckets and --buckets", "--src", dest="src")
    parser.add_argument("--length-buckets", action="store_true",
                        help="print BLEU and average output length by source length ([0,10), [10,20), ...)")
    parser.add_argument("--buckets", metavar="PNG_OR_CSV",
                        help="BLEU by source length: a .png plot or a .csv table (implies --length-buckets)")
    parser.add_argument("--bucket-width", type=int, default=10, metavar="N",
                        help="source-length bucket width in words (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--tokenised", action="store_true",
                        help="--hyp and --ref are already (Moses-)tokenised, as published systems' outputs often "
                             "are: BLEU only, on the tokens as they are (multi-bleu.perl), in scores and tests")
    parser.add_argument("--lowercase", action="store_true",
                        help="with --tokenised: case-insensitive, as multi-bleu.perl -lc")
    parser.set_defaults(func=run_score)


def _load(args) -> tuple[list[list[str]], list[str], list[str] | None]:
    refs = read_lines(args.ref)
    systems = [read_lines(path) for path in args.hyp]
    for path, lines in zip(args.hyp, systems):
        check_same_length(path, lines, args.ref, refs)
    srcs = read_lines(args.src) if args.src else None
    if srcs is not None:
        check_same_length(args.src, srcs, args.ref, refs)
    return systems, refs, srcs


def _validate(args) -> tuple[str, ...]:
    if not args.hyp or not args.ref:
        raise CtxnmtError("score needs --hyp FILE and -r/--ref FILE (or: ctxnmt score contrastive MODEL_DIR FILE)")
    metrics = check_metrics(name.strip().lower() for name in args.metrics.split(",") if name.strip())
    if args.significance and len(args.hyp) < 2:
        raise CtxnmtError("--significance needs at least two --hyp files (the first is the baseline)")
    if (args.buckets or args.length_buckets) and not args.src:
        option = "--buckets" if args.buckets else "--length-buckets"
        raise CtxnmtError(f"{option} needs -i/--input, the source text (buckets are by source length)")
    if args.buckets and Path(args.buckets).suffix.lower() not in (".png", ".csv"):
        raise CtxnmtError(f"--buckets {args.buckets}: expected a .png or .csv file name")
    if args.buckets:
        check_writable(args.buckets)
    if args.replicates < 1:
        raise CtxnmtError(f"--replicates must be positive, not {args.replicates}")
    if args.replicates > 1 and args.significance != REPLICATE_TEST:
        raise CtxnmtError("--replicates groups the --hyp files for --significance stratified-ar only")
    if args.significance == REPLICATE_TEST and (len(args.hyp) % args.replicates or len(args.hyp) < 2 * args.replicates):
        raise CtxnmtError(f"--significance stratified-ar with --replicates {args.replicates} needs a multiple of "
                          f"{args.replicates} --hyp files, at least two systems; got {len(args.hyp)}")
    if args.samples is not None and args.samples < 1:
        raise CtxnmtError(f"--samples must be positive, not {args.samples}")
    if args.lowercase and not args.tokenised:
        raise CtxnmtError("--lowercase applies to --tokenised scoring only")
    _check_lang(args)
    if args.tokenised:
        if metrics != ("bleu",):
            raise CtxnmtError("--tokenised scores BLEU only: use --metrics bleu")
        if args.significance not in (None, "bootstrap", "ar"):
            raise CtxnmtError(f"--tokenised works with --significance bootstrap or ar, not {args.significance}")
        if args.buckets or args.length_buckets:
            raise CtxnmtError("--tokenised does not combine with length buckets")
    return metrics


def _check_lang(args) -> None:
    """Tokenised BLEU Moses-tokenises detokenised files in the output's language, which score
    cannot know (English rules on Spanish output split and join other tokens): --lang gives it,
    and --tokenised files are not tokenised again."""
    if args.tokenised and args.lang:
        raise CtxnmtError("--lang is the language in which detokenised files are Moses-tokenised; --tokenised "
                          "files are scored as they are: leave out --lang")


def run_score(args: argparse.Namespace) -> int:
    """Entry point of ``ctxnmt score``."""
    metrics = _validate(args)
    systems, refs, srcs = _load(args)
    changed = reference_warning(args.ref)  # a rebuilt reference would make the scores look comparable
    if changed:
        warn(changed)
    if "bleu" in metrics and not args.tokenised and not args.lang:
        to_stderr("tokenised BLEU left out: --lang L (the output's language, e.g. --lang en) adds it")
    if args.tokenised:
        scores = [{"bleu": tokenized_bleu(hyps, refs, args.lowercase)} for hyps in systems]
    else:
        scores = [score_all(hyps, refs, metrics, lang=args.lang) for hyps in systems]
    tests = _significance(args, systems, refs, metrics) if args.significance else []
    buckets = _buckets(args, systems, refs, srcs) if args.buckets or args.length_buckets else {}
    if args.json:
        print(json.dumps(_as_json(args, scores, tests, buckets), indent=1, ensure_ascii=False))
    else:
        _print_text(args, scores, tests, buckets)
    return 0


def _significance(args, systems, refs, metrics) -> list[tuple[str, object]]:
    if args.significance == REPLICATE_TEST:
        return _replicate_significance(args, systems, refs, metrics)
    baseline = systems[0]
    scorer = tokenised_bleu_metric(args.lowercase) if args.tokenised else None
    return [(path, compare(baseline, hyps, refs, test=args.significance, metric=metric,
                           n=args.samples, seed=args.seed, scorer=scorer))
            for path, hyps in zip(args.hyp[1:], systems[1:]) for metric in metrics]


def _replicate_significance(args, systems, refs, metrics) -> list[tuple[str, object]]:
    """Each system's R outputs against the baseline's R, named by the system's first file."""
    r = args.replicates
    groups = [(args.hyp[i], systems[i:i + r]) for i in range(0, len(systems), r)]
    (_, baseline), others = groups[0], groups[1:]
    return [(name, stratified_ar(baseline, runs, refs, metric, args.samples or 10000, args.seed))
            for name, runs in others for metric in metrics]


def _buckets(args, systems, refs, srcs) -> dict[str, list]:
    by_system = {path: length_buckets(srcs, hyps, refs, width=args.bucket_width)
                 for path, hyps in zip(args.hyp, systems)}
    if args.buckets and args.buckets.lower().endswith(".png"):
        with atomic_write(args.buckets, "wb") as handle:
            plot_length_buckets(by_system, handle)
    elif args.buckets:
        _write_bucket_csv(by_system, args.buckets)
    return by_system


def _write_bucket_csv(by_system: dict[str, list], path: str) -> None:
    with atomic_write(path, "w") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["system", "bucket", "lo", "hi", "count", "bleu", "avg_hyp_len", "avg_ref_len"])
        for name, buckets in by_system.items():
            for b in buckets:
                writer.writerow([name, b.label, b.lo, b.hi, b.count, f"{b.bleu:.2f}",
                                 f"{b.avg_hyp_len:.2f}", f"{b.avg_ref_len:.2f}"])


def _print_text(args, scores, tests, buckets) -> None:
    for path, system_scores in zip(args.hyp, scores):
        print(f"== {path} ==")
        for score in system_scores.values():
            print(score.format())
        if TOKENISED_BLEU_KEY in system_scores:
            print(f"   ({system_scores[TOKENISED_BLEU_KEY].name}: Moses-tokenised with "
                  f"sacremoses, lang {args.lang}, case-sensitive; not comparable to sacreBLEU)")
    if tests:
        _print_tests(args, tests)
    if buckets:
        print("== BLEU and average output length (words) by source length (words) ==")
        print(format_length_buckets(buckets))
    if args.buckets:
        print(f"length buckets written to {args.buckets}")


def _print_tests(args, tests) -> None:
    print(f"== significance: {args.significance}, baseline {args.hyp[0]} ==")
    for path, result in tests:
        line = (f"{path}: {result.metric} {result.baseline:.2f} -> {result.system:.2f} "
                f"(delta {result.delta:+.2f}) p = {result.p_value:.4f}"
                f"{' *' if result.significant() else ''}")
        if result.ci is not None:
            line += f" [{_ci_text(result)}]"
        if result.test == "sign":
            line += " [better {better}, worse {worse}, ties {ties}]".format(**result.extra)
        if result.test == REPLICATE_TEST:
            line += f" [{result.extra['replicates']} replicates together; {result.extra['trials']} trials]"
            line += _replicate_t_text(replicate_t_test(result))
        print(line)
        if result.signature:
            print(f"   {result.signature}")


def replicate_t_test(result) -> dict | None:
    """The t-test over replicates (seed_t_test) of a stratified result: each replicate
    pair's own score difference is one observation; None with one replicate."""
    pairs = zip(result.extra["baseline_replicates"], result.extra["system_replicates"])
    return seed_t_test([system - baseline for baseline, system in pairs])


def _replicate_t_text(test: dict | None) -> str:
    if test is None:
        return ""
    t = "no spread" if test["t"] is None else f"t = {test['t']:.2f}, {test['df']} df"
    return f" [t-test over replicates: {t}, p = {test['p_value']:.4f}]"


def _ci_text(result) -> str:
    centre, half = result.ci
    what = "mean improvement" if result.test == "ttest" else "system bootstrap mean"
    return f"{what} {centre:.2f} ± {half:.2f} (95% CI)"


def _as_json(args, scores, tests, buckets) -> dict:
    out = {"ref": args.ref,
           "systems": [{"hyp": path, "scores": {k: s.to_dict() for k, s in sys_scores.items()}}
                       for path, sys_scores in zip(args.hyp, scores)]}
    if tests:
        out["significance"] = {"test": args.significance, "baseline": args.hyp[0],
                               "results": [{"hyp": path, **_result_dict(r)} for path, r in tests]}
    if buckets:
        out["buckets"] = {name: [b.to_dict() for b in bs] for name, bs in buckets.items()}
    return out


def _result_dict(result) -> dict:
    if result.test != REPLICATE_TEST:
        return result.to_dict()
    return {**result.to_dict(), "t_over_replicates": replicate_t_test(result)}
