"""`ctxnmt analyze target-attention` and `ctxnmt analyze trees`: the papers' figures
on the target-side attention of the self-attentive residual decoder.

target-attention   per sentence, a heatmap of α_ti over y_0 … y_{t-1} (PNG); over
                   the corpus, where the maximum weight falls, as the relative
                   position r_t = i*/(t-1) of i* = argmax_i α_ti (0: the start
                   symbol y_0, 1: the previous word y_{t-1}), in equal bins over
                   [0, 1] (CSV and PNG); and the bracketing of every output by
                   Algorithm 1 (trees.txt).
trees              Algorithm 1's trees of reference sentences given as Penn
                   Treebank trees (the model is forced to produce each tree's
                   words), scored with unlabelled ParsEval, next to the
                   right-branching baseline.
"""
from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import numpy as np
import torch

from ctxnmt.analysis.forced import check_without_context, join_word, target_attention, word_attention, word_groups
from ctxnmt.analysis.trees import ParsEval, attention_tree, brackets, parse_ptb, right_branching, tree_spans
from ctxnmt.data.corpus import check_same_length, read_lines, write_lines_atomic
from ctxnmt.decoding.translator import Translator, search_ids
from ctxnmt.errors import ConfigError, DataError
from ctxnmt.utils.arguments import add_checkpoint, add_input, add_model_dir, add_output, add_ref, check_at_least
from ctxnmt.utils.io import atomic_write, make_directory

START = "<s>"


# -- library --------------------------------------------------------------------------

def max_positions(alpha: torch.Tensor, words: int) -> list[float]:
    """r_t = i*/(t-1) for the steps t = 2 … words that predict words (the EOS row is
    left out; at t = 1 only y_0 exists, so that step carries no information)."""
    rows = alpha[:words].argmax(-1).tolist()  # i* for t = 1 … words
    return [i / t for t, i in enumerate(rows) if t >= 1]


def position_histogram(values: list[float], bins: int) -> list[tuple[float, float, int]]:
    """(low, high, count) of `bins` equal bins over [0, 1], the last one closed."""
    counts = [0] * bins
    for r in values:
        counts[min(int(r * bins), bins - 1)] += 1
    return [(k / bins, (k + 1) / bins, c) for k, c in enumerate(counts)]


def write_png(fig, path: Path) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    with atomic_write(path, "wb") as fh:
        fh.write(buffer.getvalue())


def plot_heatmap(alpha: torch.Tensor, tokens: list[str], path: Path) -> None:
    """Rows y_1 … y_n (the words predicted), columns y_0 … y_{n-1} (the words attended)."""
    import matplotlib.pyplot as plt  # heavy to import, and only the plots need it

    n = len(tokens)
    matrix = np.ma.masked_array(alpha[:n, :n].numpy(), mask=~np.tri(n, dtype=bool))
    size = max(3.0, 0.35 * n + 1.5)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(matrix, cmap="Reds", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(n), [START] + tokens[:-1], rotation=90)
    ax.set_yticks(range(n), tokens)
    ax.set_xlabel("attended word y_i")
    ax.set_ylabel("predicted word y_t")
    write_png(fig, path)
    plt.close(fig)


def plot_histogram(hist: list[tuple[float, float, int]], path: Path) -> None:
    import matplotlib.pyplot as plt  # heavy to import, and only the plots need it

    total = sum(c for _, _, c in hist) or 1
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar([lo for lo, _, _ in hist], [c / total for _, _, c in hist], width=hist[0][1] - hist[0][0],
           align="edge", edgecolor="black")
    ax.set_xlim(0, 1)
    ax.set_xlabel("relative position of the maximum weight (0 = <s>, 1 = previous word)")
    ax.set_ylabel("fraction of steps")
    write_png(fig, path)
    plt.close(fig)


# -- shared by the commands ---------------------------------------------------------------

def load_analysed(model_dir: str, checkpoint: str | None):
    translator = Translator.load(model_dir, checkpoint=checkpoint)
    check_without_context(translator.model, model_dir, "the target-side attention analysis")
    if not translator.model.capabilities.target_attention:
        cfg = translator.config.model
        raise ConfigError(f"{model_dir}: its {cfg.decoder} decoder with model.target_context '{cfg.target_context}' "
                          f"has no attention over previous words; use a self-attentive target context")
    return translator


def source_ids(translator, lines: list[str]) -> list[list[int]]:
    return [translator.src_vocab.encode(translator.preprocessor.encode(line, "src"), add_eos=False)
            for line in lines]


# -- target-attention -----------------------------------------------------------------

def cmd_target_attention(args) -> int:
    check_at_least(1, beam=args.beam, bins=args.bins)
    check_at_least(0, max_plots=args.max_plots)
    translator = load_analysed(args.model_dir, args.checkpoint)
    src_lines = read_lines(args.input)
    refs = read_lines(args.ref) if args.ref else None
    if refs is not None:
        check_same_length(args.ref, refs, args.input, src_lines)
    keep = [i for i, line in enumerate(src_lines) if line.strip() and (refs is None or refs[i].strip())]
    src = source_ids(translator, [src_lines[i] for i in keep])
    if refs is not None:
        tgt_tokens = [translator.preprocessor.encode(refs[i], "tgt") for i in keep]
    else:
        beam = args.beam or translator.config.decoding.beam
        hyps = search_ids(translator.model, src, translator.config.decoding, beam,
                          length=translator.length_control())
        tgt_tokens = [translator.tgt_vocab.decode(h[0].tokens) for h in hyps]
    tgt = [translator.tgt_vocab.encode(tokens) for tokens in tgt_tokens]
    alphas = target_attention(translator.model, src, tgt)

    out = Path(args.output)
    make_directory(out)
    positions: list[float] = []
    tree_lines = [""] * len(src_lines)
    for k, (line_no, tokens, alpha) in enumerate(zip(keep, tgt_tokens, alphas)):
        positions += max_positions(alpha, len(tokens))
        if tokens:
            scheme = translator.preprocessor.options.subwords
            groups = word_groups(tokens, scheme)
            words = [join_word(tokens, g, scheme) for g in groups]
            tree_lines[line_no] = brackets(attention_tree(word_attention(alpha, groups)), words)
        if k < args.max_plots and tokens:
            plot_heatmap(alpha, tokens, out / f"sentence{line_no + 1:05d}.png")
    hist = position_histogram(positions, args.bins)
    with atomic_write(out / "max_position.csv", "w") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["bin_low", "bin_high", "count", "fraction"])
        for lo, hi, count in hist:
            writer.writerow([f"{lo:.4f}", f"{hi:.4f}", count, f"{count / max(1, len(positions)):.6f}"])
    plot_histogram(hist, out / "max_position.png")
    write_lines_atomic(out / "trees.txt", tree_lines)
    on_prev = sum(r == 1.0 for r in positions) / max(1, len(positions))
    on_start = sum(r == 0.0 for r in positions) / max(1, len(positions))
    print(f"{len(keep)} sentences, {len(positions)} steps with a choice; maximum weight on the previous word "
          f"{100 * on_prev:.1f}%, on <s> {100 * on_start:.1f}%; written to {out}")
    return 0


# -- trees --------------------------------------------------------------------------------

def reference_subwords(translator, words: list[str]) -> tuple[list[str], list[list[int]]]:
    """The tree's words through the target pipeline, and which subwords belong to each
    word.  The whole sentence is encoded at once (truecasing sees the real sentence
    start); if tokenisation splits a word, each word is encoded alone instead."""
    pieces = translator.preprocessor.encode(" ".join(words), "tgt")
    groups = word_groups(pieces, translator.preprocessor.options.subwords)
    if len(groups) == len(words):
        return pieces, groups
    pieces, groups = [], []
    for word in words:
        own = translator.preprocessor.encode(word, "tgt") or ["<unk>"]
        groups.append(list(range(len(pieces), len(pieces) + len(own))))
        pieces += own
    return pieces, groups


def cmd_trees(args) -> int:
    translator = load_analysed(args.model_dir, args.checkpoint)
    src_lines = read_lines(args.input)
    refs = parse_ptb("\n".join(read_lines(args.trees)), args.trees)  # a missing or non-UTF-8 file: one line
    if len(refs) != len(src_lines):
        raise DataError(f"{args.trees} has {len(refs)} trees but {args.input} has {len(src_lines)} lines")
    encoded = [reference_subwords(translator, ref.words) for ref in refs]
    alphas = target_attention(translator.model, source_ids(translator, src_lines),
                              [translator.tgt_vocab.encode(pieces) for pieces, _ in encoded])
    induced, baseline = ParsEval(), ParsEval()
    out_lines = []
    for ref, (_, groups), alpha in zip(refs, encoded, alphas):
        tree = attention_tree(word_attention(alpha, groups))
        n = len(ref.words)
        induced.add(tree_spans(tree), ref.spans, n, args.include_root)
        baseline.add(tree_spans(right_branching(n)), ref.spans, n, args.include_root)
        out_lines.append(brackets(tree, ref.words))
    if args.output:
        write_lines_atomic(args.output, out_lines)
    else:
        sys.stdout.writelines(line + "\n" for line in out_lines)
    root = "included" if args.include_root else "excluded"
    print(f"ParsEval on {len(refs)} sentences (unlabelled; single words and, {root}, the whole sentence)\n"
          f"  attention trees  {induced.line()}\n  right-branching  {baseline.line()}",
          file=sys.stderr if not args.output else sys.stdout)
    return 0


def register(sub) -> None:
    p = sub.add_parser("target-attention", help="heatmaps and maximum-weight positions of the target attention",
                       description="Translate (or force the references), then draw the target-side attention of "
                                   "each sentence as a heatmap and the distribution of its maximum-weight positions; "
                                   "write the trees it induces (Algorithm 1).")
    add_model_dir(p, "a model with target-side attention (model.target_context: self-attentive*), as ctxnmt train "
                     "wrote it")
    add_input(p, "source sentences, one per line", required=True)
    add_ref(p, "force the model to produce these references instead of its translations")
    add_output(p, "output directory (default: %(default)s)", default="target-attention", metavar="DIR")
    p.add_argument("--bins", type=int, default=10, help="bins of the relative position (default: %(default)s)")
    p.add_argument("--max-plots", type=int, default=50, help="heatmaps for the first N sentences only")
    p.add_argument("--beam", type=int, help="beam size of the translations (default: the config's)")
    add_checkpoint(p)
    p.set_defaults(func=cmd_target_attention)

    p = sub.add_parser("trees", help="trees from target attention (Algorithm 1) scored with ParsEval",
                       description="Force the model to produce each reference tree's sentence, induce a tree from "
                                   "its target-side attention (Algorithm 1) and score the trees, and the "
                                   "right-branching baseline, against the reference trees with ParsEval.")
    add_model_dir(p, "a model with target-side attention (model.target_context: self-attentive*), as ctxnmt train "
                     "wrote it")
    add_input(p, "source sentences, one per reference tree", required=True)
    p.add_argument("--trees", required=True, help="reference trees in Penn Treebank bracket format")
    add_output(p, "write the induced bracketings here (default: stdout)")
    p.add_argument("--include-root", action="store_true", help="count the whole-sentence span as a constituent")
    add_checkpoint(p)
    p.set_defaults(func=cmd_trees)
