"""`ctxnmt analyze cxmi`: how much of a document model's probability of the reference its
context accounts for.

Conditional cross-mutual information (Fernandes et al. 2021), estimated on a test set from
the model's own probabilities:

    CXMI = 1/N · Σ_sentences Σ_t [ log p(y_t | y_<t, x, C) − log p(y_t | y_<t, x, C′) ]

over the N reference tokens (subwords, the end of sentence included), in nats.  C is each
sentence's own previous sentences; C′ takes them away ("none") or puts as many of another
document's in their place ("other"), the conditions of `analyze context`.  One term of the
sum is that token's P-CXMI (Fernandes et al. 2023): positive where the right context made
the reference token more probable.

A model trained with K previous sentences everywhere has never read an empty context, so
own − none mixes what the context says with the surprise of its absence; own − other keeps
the amount of context and changes only whose it is: the primary figure.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ctxnmt.analysis.context import (
    ContextInput,
    add_document_inputs,
    chosen_conditions,
    context_conditions,
    read_aligned,
)
from ctxnmt.analysis.tagger import apertium_tags
from ctxnmt.data.words import join_word, word_groups
from ctxnmt.decoding.commands import add_precision, use_precision_flag
from ctxnmt.decoding.forced import ForcedScore
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import DataError
from ctxnmt.utils.arguments import add_checkpoint, add_output, check_at_least
from ctxnmt.utils.io import atomic_write, make_directory
from ctxnmt.utils.messages import to_stderr

BOOTSTRAP_SAMPLES = 1000


def scored_condition(translator, given: ContextInput, refs: list[str]) -> list[ForcedScore]:
    """The references' token log-probabilities with the context `given` lends each sentence (a
    model that reads previous target sentences reads those lines' references)."""
    targets: list[str | None] = [None] * len(given.lines)
    for ref, at in zip(refs, given.keep):
        targets[at] = ref
    scores = translator.score(given.lines, targets, given.doc_ids,
                              context_targets=[refs[j] for j in given.sources])
    return [scores[at] for at in given.keep]


@dataclass
class Cxmi:
    """The sentences' summed log-probability differences and token counts under one contrast."""

    sums: np.ndarray  # (sentences,) Σ_t log p(own) − log p(other condition)
    counts: np.ndarray  # (sentences,) reference tokens

    @classmethod
    def of(cls, own: list[ForcedScore], other: list[ForcedScore]) -> Cxmi:
        return cls(np.array([a.total - b.total for a, b in zip(own, other)]),
                   np.array([len(a.log_probs) for a in own], dtype=np.int64))

    @property
    def value(self) -> float:
        return float(self.sums.sum() / self.counts.sum())

    def interval(self, samples: int = BOOTSTRAP_SAMPLES, seed: int = 1, level: float = 0.95) -> tuple[float, float]:
        """Percentile bootstrap over sentences: the corpus ratio of resampled sentence sets."""
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, len(self.sums), size=(samples, len(self.sums)))
        ratios = self.sums[picks].sum(1) / self.counts[picks].sum(1)
        tail = (1 - level) / 2 * 100
        return float(np.percentile(ratios, tail)), float(np.percentile(ratios, 100 - tail))


def word_pcxmi(own: ForcedScore, other: ForcedScore, scheme: str) -> list[tuple[str, float]]:
    """Each reference word with its P-CXMI, the sum over its subwords (a word's log-probability
    is the sum of its subwords'); the end of sentence is no word."""
    diffs = own.log_probs - other.log_probs
    pieces = own.tokens[:-1]
    return [(join_word(pieces, group, scheme), float(diffs[group].sum())) for group in word_groups(pieces, scheme)]


def mean_by(keys_values, min_count: int) -> list[dict]:
    """Mean value per key among keys seen at least `min_count` times, largest mean first."""
    found: dict[str, list[float]] = defaultdict(list)
    for key, value in keys_values:
        found[key].append(value)
    rows = [{"key": key, "count": len(values), "mean": float(np.mean(values))}
            for key, values in found.items() if len(values) >= min_count]
    return sorted(rows, key=lambda r: (-r["mean"], r["key"]))


def cxmi_report(translator, src: list[str], doc_ids: list[str], refs: list[str], against: tuple[str, ...],
                seed: int = 1, pos: bool = True, min_count: int = 5) -> dict:
    """Corpus CXMI of own against each condition of `against`, with bootstrap intervals; the
    per-sentence and per-token differences; words and POS tags by mean P-CXMI against the
    primary condition (other where asked, else none)."""
    k = translator.document_sents
    if not k:
        raise DataError("this model reads no document context: its CXMI is 0 by construction")
    inputs = context_conditions(src, doc_ids, k, seed, ("own", *against))
    scores = {name: scored_condition(translator, given, refs) for name, given in inputs.items()}
    contrasts = {name: Cxmi.of(scores["own"], scores[name]) for name in against}
    primary = "other" if "other" in against else against[0]
    scheme = translator.preprocessor.options.subwords
    words = [word_pcxmi(a, b, scheme) for a, b in zip(scores["own"], scores[primary])]
    report = {
        "primary": primary, "seed": seed, "bootstrap_samples": BOOTSTRAP_SAMPLES,
        "conditions": {name: {"cxmi": c.value, "interval": c.interval(seed=seed), "sentences": len(c.sums),
                              "tokens": int(c.counts.sum())} for name, c in contrasts.items()},
        "words": mean_by(((w.lower(), v) for line in words for w, v in line), min_count),
        "scores": scores, "sentence_words": words,
    }
    if pos:
        tags = apertium_tags([[w for w, _ in line] for line in words], translator.config.data.tgt_lang)
        report["pos"] = mean_by(((t, v) for line, line_tags in zip(words, tags)
                                 for (_, v), t in zip(line, line_tags)), 1)
    return report


def markdown(report: dict, top: int = 10) -> str:
    lines = ["| own against | CXMI (nats/token) | 95% interval | sentences | tokens |", "|---|---|---|---|---|"]
    for name, c in report["conditions"].items():
        low, high = c["interval"]
        lines.append(f"| {name} | {c['cxmi']:+.4f} | [{low:+.4f}, {high:+.4f}] | {c['sentences']} | {c['tokens']} |")
    for title, rows in (("word", report["words"][:top]), ("POS", report.get("pos", []))):
        if rows:
            lines += ["", f"| {title} | mean P-CXMI, own against {report['primary']} | count |", "|---|---|---|"]
            lines += [f"| {r['key']} | {r['mean']:+.4f} | {r['count']} |" for r in rows]
    return "\n".join(lines) + "\n"


def write_outputs(out_dir: str, report: dict, doc_ids: list[str]) -> None:
    """cxmi.json (the tables), sentences.tsv (each sentence's CXMI) and tokens.tsv (each token's
    log-probabilities and P-CXMI), every file complete or not there."""
    make_directory(out_dir)
    scores, against = report["scores"], list(report["conditions"])
    with atomic_write(Path(out_dir) / "cxmi.json", "w") as fh:
        json.dump({k: v for k, v in report.items() if k not in ("scores", "sentence_words")}, fh, indent=1)
        fh.write("\n")
    with atomic_write(Path(out_dir) / "sentences.tsv", "w") as fh:
        fh.write("\t".join(["line", "document", "tokens", *(f"cxmi_{c}" for c in against)]) + "\n")
        for n, own in enumerate(scores["own"]):
            values = [f"{(own.total - scores[c][n].total) / len(own.log_probs):.6f}" for c in against]
            fh.write("\t".join([str(n + 1), doc_ids[n], str(len(own.log_probs)), *values]) + "\n")
    with atomic_write(Path(out_dir) / "tokens.tsv", "w") as fh:
        fh.write("\t".join(["line", "position", "token", "logp_own", *(f"logp_{c}" for c in against),
                            *(f"pcxmi_{c}" for c in against)]) + "\n")
        for n, own in enumerate(scores["own"]):
            for t, token in enumerate(own.tokens):
                logps = [scores[c][n].log_probs[t] for c in against]
                fh.write("\t".join([str(n + 1), str(t + 1), token, f"{own.log_probs[t]:.6f}",
                                    *(f"{v:.6f}" for v in logps),
                                    *(f"{own.log_probs[t] - v:.6f}" for v in logps)]) + "\n")


def register(sub) -> None:
    p = sub.add_parser("cxmi", help="CXMI: how much a document model's probability of the reference owes to its "
                                    "context",
                       description="Conditional cross-mutual information (Fernandes et al. 2021): the mean over "
                                   "reference tokens of log p with each sentence's own previous sentences minus "
                                   "log p with none or another document's; with a bootstrap interval, each "
                                   "sentence's and each token's (P-CXMI) values, and the words and POS tags the "
                                   "context helps most.")
    add_document_inputs(p, "reference translations, whose probabilities are compared")
    p.add_argument("--contexts", default="none,other",
                   help="what own is compared against: none, other or both (default %(default)s; other, the same "
                        "amount of someone else's context, is the primary figure)")
    p.add_argument("--seed", type=int, default=1, help="which other documents lend their sentences, and the "
                                                       "bootstrap's resamples (default 1)")
    p.add_argument("--min-count", type=int, default=5, metavar="N",
                   help="words seen fewer times are left out of the word table (default %(default)s)")
    p.add_argument("--no-pos", action="store_true", help="no POS table (it needs Debian's apertium-eng-spa)")
    add_output(p, "write cxmi.json, sentences.tsv and tokens.tsv to this directory", "--out-dir",
               dest="out_dir", metavar="DIR")
    add_checkpoint(p)
    add_precision(p, ("fp32", "int8"))
    p.set_defaults(func=cmd_cxmi)


def cmd_cxmi(args) -> int:
    check_at_least(1, min_count=args.min_count)
    against = chosen_conditions(args.contexts, ("none", "other"))
    src, doc_ids, refs = read_aligned(args)
    translator = Translator.load(args.model_dir, checkpoint=args.checkpoint)
    use_precision_flag(translator, args.precision)
    if translator.reads_target:
        to_stderr("target-side context: the references (-r) of the previous lines, in every condition")
    report = cxmi_report(translator, src, doc_ids, refs, against, args.seed, not args.no_pos, args.min_count)
    if args.out_dir:
        write_outputs(args.out_dir, report, doc_ids)
    print(markdown(report).rstrip())
    return 0
