"""`ctxnmt analyze alignment`: how well attention aligns words (the adaptive-weighting
paper's Table 3).  The model is forced to produce each reference; its attention
α_t over the source while predicting the reference's tokens gives word alignments,
scored with AER (argmax links) and SAER (the probabilities) against a gold alignment
(ctxnmt.analysis.aer) or a silver one (--silver, ctxnmt.analysis.silver).

Words and subwords.  A word is a token of the model's own preprocessing (Moses
tokenisation, truecasing) before its subwords, i.e. a maximal run of BPE pieces whose
pieces but the last end in "@@", or of SentencePiece pieces whose first alone starts
with "▁" (ctxnmt.data.words).  The word-level weight of target word j on source word i is

    M[j][i] = (1/|T_j|) Σ_{t ∈ T_j} Σ_{s ∈ S_i} α_t[s]

the attention mass the source word's pieces receive (a sum: α_t is a distribution
over source positions), averaged over the target word's pieces (each piece is a
separate prediction; the mean keeps each row a distribution).  The step that
predicts EOS is left out.  The argmax alignment links each target word to the
source word of its largest M[j][i].

Gold alignments number those words from 0 (Pharaoh) or 1 (NAACL), so give source and
reference already tokenised as the gold was (the Moses tokeniser leaves tokenised
text unchanged); a line whose word count differs from its number of
whitespace-separated tokens is an error that names it.  A silver file written by
--write-silver numbers the model's own words of the raw text: read it back with
--gold-words model (any model with the same tokenisation), so that every model is
scored against the same silver links.
"""
from __future__ import annotations

import json
import sys

import torch

from ctxnmt.analysis.aer import (
    GoldAlignment,
    aer,
    argmax_links,
    check_bounds,
    format_pharaoh,
    read_naacl,
    read_pharaoh,
    saer,
)
from ctxnmt.analysis.forced import check_without_context, join_word, source_attention, word_groups
from ctxnmt.analysis.silver import SILVER_LABEL, silver_alignment
from ctxnmt.data.corpus import check_same_length, read_lines, write_lines_atomic
from ctxnmt.data.prepare import split_paths
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import DataError
from ctxnmt.utils.arguments import add_checkpoint, add_input, add_model_dir, add_output, add_ref
from ctxnmt.utils.io import atomic_write


def word_matrix(alpha: torch.Tensor, src_groups: list[list[int]], tgt_groups: list[list[int]]) -> list[list[float]]:
    """M[j][i] from subword attention α (target subwords (+EOS), source subwords); see the module doc.

    As one product H α G: H (J, T) averages each target word's rows, G (S, I) sums each
    source word's columns; the EOS row has no target word, so H leaves it out."""
    H = torch.zeros(len(tgt_groups), alpha.size(0), dtype=torch.float64)
    for j, group in enumerate(tgt_groups):
        H[j, group] = 1.0 / len(group)
    G = torch.zeros(alpha.size(1), len(src_groups), dtype=torch.float64)
    for i, group in enumerate(src_groups):
        G[group, i] = 1.0
    return (H @ alpha.double() @ G).tolist()


def forced_word_alignments(translator, src_lines: list[str], ref_lines: list[str]):
    """Per line: (source words, target words, M) of the model forced to produce the reference."""
    pre = translator.preprocessor
    src_pieces = pre.encode_many(src_lines, "src")
    tgt_pieces = pre.encode_many(ref_lines, "tgt")
    alphas = source_attention(translator.model, [translator.src_vocab.encode(p, add_eos=False) for p in src_pieces],
                              [translator.tgt_vocab.encode(p) for p in tgt_pieces])
    out = []
    scheme = pre.options.subwords
    for s, t, alpha in zip(src_pieces, tgt_pieces, alphas):
        sg, tg = word_groups(s, scheme), word_groups(t, scheme)
        out.append((_words(s, sg, scheme), _words(t, tg, scheme), word_matrix(alpha, sg, tg)))
    return out


def _words(pieces: list[str], groups: list[list[int]], scheme: str) -> list[str]:
    return [join_word(pieces, g, scheme) for g in groups]


def _line_words(pre, lines: list[str], side: str) -> list[list[str]]:
    scheme = pre.options.subwords
    return [_words(p, word_groups(p, scheme), scheme) for p in pre.encode_many(lines, side)]


def check_tokenised(lines: list[str], words: list[list[str]], path: str) -> None:
    for n, (line, w) in enumerate(zip(lines, words), 1):
        if len(line.split()) != len(w):
            raise DataError(f"{path}:{n}: the model's tokenisation gives {len(w)} words but the line has "
                            f"{len(line.split())} tokens; give text tokenised as the gold alignment's words")


def score(matrices: list[list[list[float]]], gold: list[GoldAlignment]) -> dict:
    hard = [argmax_links(m) for m in matrices]
    return {"aer": aer(hard, gold), "saer": saer(matrices, gold), "sentences": len(gold),
            "sure_links": sum(len(g.sure) for g in gold), "possible_links": sum(len(g.possible) for g in gold),
            "hypothesis_links": sum(len(a) for a in hard)}


# -- command ---------------------------------------------------------------------------------

def register(sub) -> None:
    p = sub.add_parser("alignment", help="AER and SAER of the attention of a model forced to produce the reference",
                       description="Force the model to produce the reference, take each target word's most attended "
                                   "source word as its alignment and score these links against a gold (or silver) "
                                   "alignment: AER and SAER (docs/alignment.md).")
    add_model_dir(p)
    add_input(p, "source sentences, one per line", required=True)
    add_ref(p, "reference translations, line-aligned", "--reference", dest="reference", required=True)
    gold = p.add_mutually_exclusive_group(required=True)
    gold.add_argument("--gold", help="gold alignment file (see --gold-format)")
    gold.add_argument("--silver", action="store_true",
                      help="align input and reference with eflomal + grow-diag-final instead (a silver standard)")
    p.add_argument("--gold-format", choices=("pharaoh", "naacl"), default="pharaoh")
    p.add_argument("--possible", help="Pharaoh file of possible links, line-aligned with --gold")
    p.add_argument("--gold-words", choices=("whitespace", "model"), default="whitespace",
                   help="what the gold's positions count: the input's whitespace tokens (checked against the "
                        "model's words) or the model's own words (as in a --write-silver file)")
    p.add_argument("--silver-train", nargs=2, metavar=("SRC", "TGT"),
                   help="the corpus eflomal learns from (default: the model's training corpus)")
    p.add_argument("--write-silver", metavar="F", help="write the silver links (Pharaoh) here")
    p.add_argument("--write-links", metavar="F", help="write the attention's argmax links (Pharaoh) here")
    add_output(p, "JSON file with the scores (written atomically)")
    add_checkpoint(p)
    p.set_defaults(func=cmd_alignment)


def cmd_alignment(args) -> int:
    src = read_lines(args.input)
    ref = read_lines(args.reference)
    check_same_length(args.reference, ref, args.input, src)
    if args.silver and args.possible:
        raise DataError("--possible belongs to --gold; a silver alignment has sure links only")
    translator = Translator.load(args.model_dir, checkpoint=args.checkpoint)
    check_without_context(translator.model, args.model_dir, "the alignment analysis")
    forced = forced_word_alignments(translator, src, ref)
    keep = [k for k, (s, t, _) in enumerate(forced) if s and t]  # empty lines have nothing to align
    if args.silver:
        gold, label = silver_gold(translator, args, forced, keep), "silver"
    else:
        if args.gold_words == "whitespace":
            check_tokenised([src[k] for k in keep], [forced[k][0] for k in keep], args.input)
            check_tokenised([ref[k] for k in keep], [forced[k][1] for k in keep], args.reference)
        gold, label = read_gold(args, len(src)), "gold"
        check_bounds(gold, [len(s) for s, _, _ in forced], [len(t) for _, t, _ in forced], args.gold)
        gold = [gold[k] for k in keep]
    result = score([forced[k][2] for k in keep], gold)
    if args.write_links:
        write_lines_atomic(args.write_links, (format_pharaoh(argmax_links(m)) for _, _, m in forced))
    result.update(model=str(args.model_dir), input=args.input, reference=args.reference, alignment=label,
                  alignment_file=args.write_silver if args.silver else args.gold)
    if args.silver:
        result["alignment_label"] = SILVER_LABEL
    if args.output:
        with atomic_write(args.output, "w") as fh:
            json.dump(result, fh, indent=2)
            fh.write("\n")
    sys.stdout.write(format_result(result))
    return 0


def format_result(r: dict) -> str:
    # a file given with --gold is named as it is (it may itself be a --write-silver file)
    against = r.get("alignment_label", f"the links in {r['alignment_file']}")
    return (f"AER {r['aer']:.4f}  SAER {r['saer']:.4f}  on {r['sentences']} sentences "
            f"({r['sure_links']} sure, {r['possible_links']} possible links)  against: {against}\n")


def read_gold(args, sentences: int) -> list[GoldAlignment]:
    if args.gold_format == "naacl":
        if args.possible:
            raise DataError("--possible is for Pharaoh gold files; NAACL lines carry their own S/P label")
        return read_naacl(args.gold, sentences)
    return read_pharaoh(args.gold, args.possible)


def silver_gold(translator, args, forced: list, keep: list[int]) -> list[GoldAlignment]:
    """Silver links of the kept lines; --write-silver gets one line per input line (empty where skipped)."""
    if args.silver_train:
        train_src, train_tgt = args.silver_train
    else:
        train_src, train_tgt, _ = split_paths(translator.config.data, "train")
    src_lines, tgt_lines = read_lines(train_src), read_lines(train_tgt)
    check_same_length(train_tgt, tgt_lines, train_src, src_lines)
    pairs = [(s, t) for s, t in zip(src_lines, tgt_lines) if s.strip() and t.strip()]
    pre = translator.preprocessor
    train_s = _line_words(pre, [s for s, _ in pairs], "src")
    train_t = _line_words(pre, [t for _, t in pairs], "tgt")
    links = silver_alignment(train_s, train_t, [forced[k][0] for k in keep], [forced[k][1] for k in keep])
    if args.write_silver:
        by_line = dict(zip(keep, links))
        write_lines_atomic(args.write_silver, (format_pharaoh(by_line.get(k, set())) for k in range(len(forced))))
    return [GoldAlignment(sure=set(a), possible=set(a)) for a in links]  # silver links are all sure
