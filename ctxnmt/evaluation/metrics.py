"""Corpus- and sentence-level MT metrics on top of sacreBLEU.

Two BLEU conventions are reported side by side because the literature this
toolkit reproduces uses both: detokenised sacreBLEU (comparable across papers,
with a signature) and BLEU on Moses-tokenised text scored without further
tokenisation, which is what ``multi-bleu.perl`` computed in older papers.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER
from sacremoses import MosesTokenizer

from ctxnmt.errors import ConfigError, DataError

METRICS = ("bleu", "chrf", "ter")
TOKENISED_BLEU_KEY = "bleu_tok"
TOKENISED_BLEU_NAME = "tokenised BLEU (multi-bleu convention)"

# TER is an error rate; every other metric here improves upwards.
HIGHER_IS_BETTER = {"bleu": True, "chrf": True, "ter": False}


@dataclass
class Score:
    """One corpus-level score with what is needed to reproduce it.

    ``extra`` holds metric-specific details (for BLEU: precisions, BP, length
    ratio, hypothesis and reference lengths).
    """

    name: str
    value: float
    signature: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def format(self, width: int = 2) -> str:
        """One line in sacreBLEU's style: ``NAME|SIGNATURE = VALUE (details)``."""
        head = f"{self.name}|{self.signature}" if self.signature else self.name
        line = f"{head} = {self.value:.{width}f}"
        details = _format_extra(self.extra)
        return f"{line} ({details})" if details else line

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view."""
        return {"name": self.name, "value": self.value,
                "signature": self.signature, **self.extra}


@dataclass
class Bucket:
    """Scores for the sentences whose source length lies in ``[lo, hi)``.

    ``hi`` is ``math.inf`` for an open-ended last bucket.
    """

    lo: int
    hi: float
    count: int
    bleu: float
    avg_hyp_len: float
    avg_ref_len: float

    @property
    def label(self) -> str:
        """Human-readable range, e.g. ``10-19`` or ``50+``."""
        if math.isinf(self.hi):
            return f"{self.lo}+"
        return f"{self.lo}-{int(self.hi) - 1}"

    def to_dict(self) -> dict:
        """As a JSON report holds it: the label first, an open end as null."""
        return {"label": self.label, "lo": self.lo, "hi": None if math.isinf(self.hi) else int(self.hi),
                "count": self.count, "bleu": self.bleu, "avg_hyp_len": self.avg_hyp_len,
                "avg_ref_len": self.avg_ref_len}


def _format_extra(extra: dict[str, Any]) -> str:
    parts = []
    for key, value in extra.items():
        if isinstance(value, float):
            value = f"{value:.3f}"
        elif isinstance(value, (list, tuple)):
            value = "/".join(f"{v:.1f}" for v in value)
        parts.append(f"{key} = {value}")
    return ", ".join(parts)


def check_pair(hyps: Sequence[str], refs: Sequence[str]) -> None:
    """Raise DataError unless hypotheses and references are non-empty and aligned."""
    # sacreBLEU silently truncates to the shorter side (zip), which would hide
    # a misaligned file, so lengths are checked here first.
    if len(hyps) != len(refs):
        raise DataError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise DataError("nothing to score: no hypotheses")


def _bleu_score(metric: BLEU, name: str, hyps: Sequence[str], refs: Sequence[str]) -> Score:
    check_pair(hyps, refs)
    result = metric.corpus_score(list(hyps), [list(refs)])
    extra = {"precisions": list(result.precisions), "BP": result.bp,
             "ratio": result.ratio, "hyp_len": result.sys_len, "ref_len": result.ref_len}
    return Score(name, result.score, str(metric.get_signature()), extra)


def bleu(hyps: Sequence[str], refs: Sequence[str]) -> Score:
    """Detokenised corpus BLEU with sacreBLEU's defaults (13a tokeniser, exp smoothing)."""
    return _bleu_score(BLEU(), "BLEU", hyps, refs)


def tokenised_bleu_metric(lowercase: bool = False) -> BLEU:
    """BLEU on already-tokenised text as ``multi-bleu.perl`` (``-lc``: lowercase) computes it:
    tokens are whitespace-separated and not tokenised again; no smoothing, so a zero n-gram
    precision gives BLEU 0 just as multi-bleu.perl does."""
    return BLEU(tokenize="none", smooth_method="none", lowercase=lowercase, force=True)


def tokenized_bleu(hyps_tok: Sequence[str], refs_tok: Sequence[str], lowercase: bool = False) -> Score:
    """BLEU on already-tokenised text (tokenised_bleu_metric); case-sensitive by default."""
    name = TOKENISED_BLEU_NAME + (", lowercased" if lowercase else "")
    return _bleu_score(tokenised_bleu_metric(lowercase), name, hyps_tok, refs_tok)


def chrf(hyps: Sequence[str], refs: Sequence[str]) -> Score:
    """Corpus chrF (sacreBLEU defaults: character 6-grams, beta 2)."""
    check_pair(hyps, refs)
    metric = CHRF()
    result = metric.corpus_score(list(hyps), [list(refs)])
    return Score(result.name, result.score, str(metric.get_signature()))


def ter(hyps: Sequence[str], refs: Sequence[str]) -> Score:
    """Corpus TER (sacreBLEU's tercom reimplementation); lower is better."""
    check_pair(hyps, refs)
    metric = TER()
    result = metric.corpus_score(list(hyps), [list(refs)])
    extra = {"edits": result.num_edits, "ref_len": float(result.ref_length)}
    return Score(result.name, result.score, str(metric.get_signature()), extra)


def moses_tokenize(lines: Iterable[str], lang: str = "en") -> list[str]:
    """Moses-tokenise detokenised lines without XML escaping."""
    tokenizer = MosesTokenizer(lang=lang)
    return [tokenizer.tokenize(line, escape=False, return_str=True) for line in lines]


def check_metrics(metrics: Iterable[str]) -> tuple[str, ...]:
    """Validate metric names, raising ConfigError that lists the valid ones."""
    names = tuple(metrics)
    unknown = [m for m in names if m not in METRICS]
    if unknown or not names:
        bad = ", ".join(unknown) if unknown else "(none given)"
        raise ConfigError(f"unknown metric {bad}; valid metrics: {', '.join(METRICS)}")
    return names


_CORPUS_FUNCS = {"bleu": bleu, "chrf": chrf, "ter": ter}


def score_all(hyps: Sequence[str], refs: Sequence[str],
              metrics: Sequence[str] = METRICS, lang: str | None = "en") -> dict[str, Score]:
    """Every requested metric, keyed by name.

    Requesting ``"bleu"`` with a ``lang`` also adds ``"bleu_tok"``: tokenised BLEU
    computed after Moses-tokenising both sides in ``lang``.
    """
    names = check_metrics(metrics)
    check_pair(hyps, refs)
    scores = {name: _CORPUS_FUNCS[name](hyps, refs) for name in names}
    if "bleu" in names and lang is not None:
        tok = tokenized_bleu(moses_tokenize(hyps, lang), moses_tokenize(refs, lang))
        tok.extra["pretok"] = f"sacremoses-{lang}"
        scores[TOKENISED_BLEU_KEY] = tok
    return scores


def sentence_metric(metric: str):
    """A fresh sacreBLEU metric object suited to sentence-level scoring."""
    check_metrics([metric])
    if metric == "bleu":
        # Without effective order, any sentence shorter than 4 tokens scores 0.
        return BLEU(effective_order=True)
    return CHRF() if metric == "chrf" else TER()


def sentence_scores(hyps: Sequence[str], refs: Sequence[str], metric: str = "bleu") -> list[float]:
    """Per-sentence scores (BLEU with effective-order smoothing, chrF or TER)."""
    check_pair(hyps, refs)
    scorer = sentence_metric(metric)
    return [scorer.sentence_score(h, [r]).score for h, r in zip(hyps, refs)]


def _bucket_start(length: int, width: int, cap: int | None) -> int:
    if cap is not None and length >= cap:
        return cap
    return (length // width) * width


def length_buckets(srcs: Sequence[str], hyps: Sequence[str], refs: Sequence[str],
                   width: int = 10, cap: int | None = None) -> list[Bucket]:
    """BLEU and average lengths grouped by source length in whitespace tokens.

    Buckets are ``[0, width)``, ``[width, 2*width)``, ...; only non-empty ones
    are returned. With ``cap``, every sentence of ``cap`` or more source words
    goes into one open bucket ``[cap, inf)`` so a sparse tail does not give
    noisy points.
    """
    if width < 1:
        raise ConfigError(f"bucket width must be at least 1, not {width}")
    check_pair(hyps, refs)
    if len(srcs) != len(hyps):
        raise DataError(f"{len(srcs)} source sentences but {len(hyps)} hypotheses")
    groups: dict[int, list[int]] = {}
    for i, src in enumerate(srcs):
        groups.setdefault(_bucket_start(len(src.split()), width, cap), []).append(i)
    return [_make_bucket(lo, idx, hyps, refs, width, cap) for lo, idx in sorted(groups.items())]


def _make_bucket(lo: int, idx: list[int], hyps, refs, width: int, cap: int | None) -> Bucket:
    sub_hyps = [hyps[i] for i in idx]
    sub_refs = [refs[i] for i in idx]
    hi = math.inf if cap is not None and lo >= cap else lo + width
    return Bucket(lo=lo, hi=hi, count=len(idx), bleu=bleu(sub_hyps, sub_refs).value,
                  avg_hyp_len=_mean_words(sub_hyps), avg_ref_len=_mean_words(sub_refs))


def _mean_words(lines: Sequence[str]) -> float:
    return sum(len(line.split()) for line in lines) / len(lines)


def mean_buckets(runs: Sequence[Sequence[Bucket]]) -> list[Bucket]:
    """Average several runs' buckets over the same sources (e.g. one system's seeds)."""
    first = runs[0]
    if any([(b.lo, b.count) for b in r] != [(b.lo, b.count) for b in first] for r in runs):
        raise DataError("buckets to average must come from the same source sentences")
    return [Bucket(lo=b.lo, hi=b.hi, count=b.count,
                   bleu=sum(r[i].bleu for r in runs) / len(runs),
                   avg_hyp_len=sum(r[i].avg_hyp_len for r in runs) / len(runs),
                   avg_ref_len=b.avg_ref_len) for i, b in enumerate(first)]


def format_length_buckets(buckets_by_system: dict[str, list[Bucket]]) -> str:
    """A Markdown table: one row per source-length bucket, BLEU and output length per system."""
    labels = _bucket_labels(buckets_by_system)
    by_label = {name: {b.label: b for b in buckets} for name, buckets in buckets_by_system.items()}
    any_system = {b.label: b for buckets in buckets_by_system.values() for b in buckets}
    head = ["source words", "sentences", "reference length"]
    for name in buckets_by_system:
        head += [f"{name} BLEU", f"{name} length"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        row = [label, str(any_system[label].count), f"{any_system[label].avg_ref_len:.1f}"]
        for name in buckets_by_system:
            bucket = by_label[name].get(label)
            row += [f"{bucket.bleu:.2f}", f"{bucket.avg_hyp_len:.1f}"] if bucket else ["–", "–"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def plot_length_buckets(buckets_by_system: dict[str, list[Bucket]], path) -> None:
    """Write a PNG: BLEU by source length (left) and output length (right).

    Drawn with matplotlib's Agg canvas directly so that importing this module
    never switches the process-wide pyplot backend.
    """
    # matplotlib is heavy to import and only the plots need it: imported here, not with the module
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels = _bucket_labels(buckets_by_system)
    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax_bleu, ax_len = fig.subplots(1, 2)
    for name, buckets in buckets_by_system.items():
        _plot_series(ax_bleu, labels, buckets, "bleu", name)
        _plot_series(ax_len, labels, buckets, "avg_hyp_len", name)
    reference = next(iter(buckets_by_system.values()), [])
    _plot_series(ax_len, labels, reference, "avg_ref_len", "reference", linestyle="--", color="black")
    _decorate(ax_bleu, labels, "BLEU")
    _decorate(ax_len, labels, "average output length (words)")
    fig.savefig(path, format="png", dpi=100)


def _bucket_labels(buckets_by_system: dict[str, list[Bucket]]) -> list[str]:
    spans = {(b.lo, b.hi): b.label for buckets in buckets_by_system.values() for b in buckets}
    return [spans[key] for key in sorted(spans)]


def _plot_series(ax, labels: list[str], buckets: list[Bucket], attr: str, name: str, **style) -> None:
    xs = [labels.index(b.label) for b in buckets]
    ax.plot(xs, [getattr(b, attr) for b in buckets], marker="o", label=name, **style)


def _decorate(ax, labels: list[str], ylabel: str) -> None:
    ax.set_xticks(range(len(labels)), labels, rotation=45)
    ax.set_xlabel("source sentence length (words)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
