"""Paired significance tests between a baseline and a system.

Corpus-level resampling tests (paired bootstrap, approximate randomisation)
are delegated to sacreBLEU's own implementation; the sentence-level tests
(paired t-test, sign test) use scipy on per-sentence scores.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest
from scipy import stats

from ctxnmt.errors import ConfigError, DataError
from ctxnmt.evaluation.metrics import HIGHER_IS_BETTER, check_metrics, check_pair, sentence_metric, sentence_scores

TESTS = ("bootstrap", "ar", "ttest", "sign")
DEFAULT_SAMPLES = {"bootstrap": 1000, "ar": 10000}
# How reports name each test.  The bootstrap's p-value is the share of resampled |differences|,
# less their mean, above the observed difference: for a clear difference that is the upper tail
# of a distribution centred on zero, a one-sided p-value, about half of the two-sided one.
DESCRIPTIONS = {"bootstrap": "paired bootstrap (sacreBLEU's; its p-value is in effect one-sided)",
                "ar": "two-sided paired approximate randomisation (sacreBLEU's)",
                "ttest": "one-sided paired t-test on sentence scores",
                "sign": "one-sided sign test on sentence scores"}


@dataclass
class SigResult:
    """Outcome of one paired test.

    ``ci`` is ``(centre, half_width)`` of a 95% interval or None. For the
    resampling tests it is sacreBLEU's bootstrap estimate of the system's
    score; for the t-test it is the mean per-sentence improvement. ``extra``
    holds test-specific counts (samples, better/worse/ties, ...).
    """

    test: str
    metric: str
    baseline: float
    system: float
    p_value: float
    ci: tuple[float, float] | None = None
    signature: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def delta(self) -> float:
        """System minus baseline."""
        return self.system - self.baseline

    def significant(self, alpha: float = 0.05) -> bool:
        """Whether the p-value is below ``alpha``."""
        return self.p_value < alpha

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view."""
        return {"test": self.test, "metric": self.metric, "baseline": self.baseline,
                "system": self.system, "delta": self.delta, "p_value": self.p_value,
                "ci": list(self.ci) if self.ci else None, "signature": self.signature,
                **self.extra}


@contextmanager
def _sacrebleu_seed(seed: int | None):
    # PairedTest reads its seed only from this environment variable.
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = "none" if seed is None else str(seed)
    try:
        yield
    finally:
        if old is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = old


def check_seed(seed: int | None) -> None:
    # sacreBLEU tests `if seed` when seeding each system, so 0 would silently
    # leave the system-side resampling unseeded and results irreproducible.
    if seed is not None and seed <= 0:
        raise ConfigError(f"seed must be a positive integer or None, not {seed}")


def _check_systems(baseline_hyps: Sequence[str], system_hyps: Sequence[str],
                   refs: Sequence[str]) -> None:
    check_pair(baseline_hyps, refs)
    if len(system_hyps) != len(baseline_hyps):
        raise DataError(f"baseline has {len(baseline_hyps)} lines but system has {len(system_hyps)}")


def _resampling_test(test_type: str, baseline_hyps, system_hyps, refs, metric: str,
                     n: int, seed: int | None, scorer=None) -> SigResult:
    check_metrics([metric])
    _check_systems(baseline_hyps, system_hyps, refs)
    check_seed(seed)
    scorer = scorer or corpus_metric(metric)
    systems = [("baseline", list(baseline_hyps)), ("system", list(system_hyps))]
    with _sacrebleu_seed(seed):
        # AR gets a bootstrap CI too (n_ar_confidence=0 means sacreBLEU's default size).
        test = PairedTest(systems, {metric: scorer}, [list(refs)], test_type=test_type,
                          n_samples=n, n_ar_confidence=0 if test_type == "ar" else -1)
        signatures, results = test()
    name = next(key for key in results if key != "System")
    base, system = results[name]
    return SigResult(
        test="bootstrap" if test_type == "bs" else "ar", metric=name,
        baseline=base.score, system=system.score,
        p_value=_zero_difference_p(base.score, system.score, system.p_value),
        ci=(float(system.mean), float(system.ci)) if system.mean is not None else None,
        signature=str(signatures[name]),
        extra={"samples": test.n_samples,
               "baseline_ci": [float(base.mean), float(base.ci)] if base.mean is not None else None})


def corpus_metric(metric: str):
    """A fresh sacreBLEU metric object for corpus scores."""
    # Same metric objects as corpus scoring, except BLEU must not use
    # effective order at corpus level.
    return BLEU() if metric == "bleu" else sentence_metric(metric)


def _zero_difference_p(baseline: float, system: float, p_value: float) -> float:
    """Correct sacreBLEU's p-value when the observed difference is exactly zero.

    sacreBLEU counts resamples with a *strictly* larger difference, so two
    identical outputs (every resampled difference also zero) get the smallest
    possible p-value, 1/(n+1), i.e. "significant". A zero observed difference
    is no evidence of any difference: P(|D| >= 0) = 1.
    """
    return 1.0 if baseline == system else float(p_value)


def paired_bootstrap(baseline_hyps: Sequence[str], system_hyps: Sequence[str],
                     refs: Sequence[str], metric: str = "bleu", n: int = 1000,
                     seed: int | None = 12345, *, scorer=None) -> SigResult:
    """Paired bootstrap resampling (Koehn 2004) via sacreBLEU's PairedTest; its p-value
    behaves as a one-sided test's (DESCRIPTIONS): approximate_randomization is two-sided."""
    return _resampling_test("bs", baseline_hyps, system_hyps, refs, metric, n, seed, scorer)


def approximate_randomization(baseline_hyps: Sequence[str], system_hyps: Sequence[str],
                              refs: Sequence[str], metric: str = "bleu", n: int = 10000,
                              seed: int | None = 12345, *, scorer=None) -> SigResult:
    """Paired approximate randomisation (Riezler & Maxwell 2005) via sacreBLEU."""
    return _resampling_test("ar", baseline_hyps, system_hyps, refs, metric, n, seed, scorer)


def _improvements(baseline: Sequence[float], system: Sequence[float],
                  higher_is_better: bool) -> np.ndarray:
    if len(baseline) != len(system):
        raise DataError(f"{len(baseline)} baseline scores but {len(system)} system scores")
    if not baseline:
        raise DataError("no sentence scores to test")
    diff = np.asarray(system, dtype=float) - np.asarray(baseline, dtype=float)
    return diff if higher_is_better else -diff


def paired_t_test(baseline_sent_scores: Sequence[float], system_sent_scores: Sequence[float],
                  higher_is_better: bool = True, metric: str = "score") -> SigResult:
    """One-tailed paired t-test that the system improves on the baseline.

    ``ci`` is the two-sided 95% interval of the mean per-sentence improvement
    (positive means the system is better, whatever the metric's direction).
    """
    diff = _improvements(baseline_sent_scores, system_sent_scores, higher_is_better)
    if len(diff) < 2:
        raise DataError("the paired t-test needs at least two sentences")
    extra = {"sentences": len(diff)}
    if np.all(diff == diff[0]):
        # No variance: scipy gives NaN, but the limit of t is +-inf or, for
        # identical outputs, there is simply no evidence of a difference.
        p_value = 0.0 if diff[0] > 0 else 1.0
        return _sentence_result("ttest", metric, baseline_sent_scores, system_sent_scores,
                                p_value, (float(diff[0]), 0.0), extra)
    zeros = np.zeros_like(diff)
    one_sided = stats.ttest_rel(diff, zeros, alternative="greater")
    interval = stats.ttest_rel(diff, zeros).confidence_interval(0.95)
    centre = float(diff.mean())
    extra["t"] = float(one_sided.statistic)
    return _sentence_result("ttest", metric, baseline_sent_scores, system_sent_scores,
                            float(one_sided.pvalue), (centre, float(interval.high) - centre), extra)


def sign_test(baseline_sent_scores: Sequence[float], system_sent_scores: Sequence[float],
              higher_is_better: bool = True, metric: str = "score") -> SigResult:
    """One-tailed sign test (Collins et al. 2005); tied sentences are dropped."""
    diff = _improvements(baseline_sent_scores, system_sent_scores, higher_is_better)
    better, worse = int(np.sum(diff > 0)), int(np.sum(diff < 0))
    extra = {"better": better, "worse": worse, "ties": len(diff) - better - worse}
    p_value = 1.0
    if better + worse:
        p_value = float(stats.binomtest(better, better + worse, 0.5, alternative="greater").pvalue)
    return _sentence_result("sign", metric, baseline_sent_scores, system_sent_scores,
                            p_value, None, extra)


def _sentence_result(test: str, metric: str, baseline, system, p_value: float,
                     ci, extra: dict) -> SigResult:
    return SigResult(test=test, metric=metric, baseline=float(np.mean(baseline)),
                     system=float(np.mean(system)), p_value=p_value, ci=ci, extra=extra)


def compare(baseline_hyps: Sequence[str], system_hyps: Sequence[str], refs: Sequence[str],
            test: str = "bootstrap", metric: str = "bleu", n: int | None = None,
            seed: int | None = 12345, scorer=None) -> SigResult:
    """Run one named test (``bootstrap``, ``ar``, ``ttest`` or ``sign``).

    ``n`` is the number of resamples/trials for the resampling tests (default
    1000 for bootstrap, 10000 for AR) and is ignored by the others. For the
    sentence-level tests ``baseline``/``system`` are mean sentence scores.  ``scorer``: a
    sacreBLEU corpus metric to resample instead of the metric's default (e.g. BLEU on
    already-tokenised text); resampling tests only.
    """
    if test not in TESTS:
        raise ConfigError(f"unknown significance test {test}; valid tests: {', '.join(TESTS)}")
    check_metrics([metric])
    if test == "bootstrap":
        return paired_bootstrap(baseline_hyps, system_hyps, refs, metric, n or DEFAULT_SAMPLES[test], seed,
                                scorer=scorer)
    if test == "ar":
        return approximate_randomization(baseline_hyps, system_hyps, refs, metric,
                                         n or DEFAULT_SAMPLES[test], seed, scorer=scorer)
    if scorer is not None:
        raise ConfigError(f"the {test} test scores sentences with the metric's own defaults; "
                          f"use bootstrap or ar for BLEU on tokenised text")
    _check_systems(baseline_hyps, system_hyps, refs)
    base = sentence_scores(baseline_hyps, refs, metric)
    system = sentence_scores(system_hyps, refs, metric)
    run = paired_t_test if test == "ttest" else sign_test
    return run(base, system, HIGHER_IS_BETTER[metric], metric=f"sentence-{metric}")


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar(first: np.ndarray, second: np.ndarray) -> float:
    """Exact two-sided McNemar test of paired right/wrong outcomes: a binomial test of the
    examples one condition gets right and the other wrong."""
    b, c = int((first & ~second).sum()), int((~first & second).sum())
    return float(stats.binomtest(b, b + c, 0.5).pvalue) if b + c else 1.0
