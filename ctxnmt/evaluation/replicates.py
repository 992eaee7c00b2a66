"""Significance over training replicates (Clark, Dyer, Lavie and Smith 2011).

A neural system trained with another seed translates differently, and a paired test on one
seed pair can call a difference that the next seed reverses.  Clark et al. answer this for
optimiser instability with approximate randomisation stratified over replicates, as
MultEval implements it: every system is run R times (here: trained with R seeds), the
statistic is the difference of the metric computed on all R outputs together, and a trial
swaps the two systems' outputs of one sentence in one replicate pair, independently for
every (replicate, sentence) stratum:

    δ = |M(∪_r A_r) − M(∪_r B_r)|,      p = (1 + #{trials with δ' ≥ δ}) / (1 + trials)

M is a corpus metric computed from summed per-sentence sufficient statistics (BLEU's n-gram
counts and lengths, chrF's character and word n-gram counts, TER's edits and lengths), so
a trial costs one sum, not a re-scoring.  Replicate r of the system is paired with
replicate r of the baseline (the same seed).  With R = 1 this is the ordinary paired
approximate randomisation test.  `shuffled_p` is the test itself, on any per-sentence
statistics and corpus score: the language models' perplexity uses it too (ctxnmt.experiments.perplexity).
`seed_t_test` asks the other question, whether the seeds agree, with the seeds as the sample;
`seed_t_power` is its power against a given true difference.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

from ctxnmt.errors import ConfigError, DataError
from ctxnmt.evaluation.metrics import check_metrics, check_pair
from ctxnmt.evaluation.significance import SigResult, check_seed, corpus_metric

TEST = "stratified-ar"
DEFAULT_TRIALS = 10000
_CHUNK = 500  # trials whose statistic sums are formed as one matrix product


def _check_replicates(baseline_runs: Sequence[Sequence[str]], system_runs: Sequence[Sequence[str]],
                      refs: Sequence[str]) -> None:
    if not baseline_runs:
        raise DataError("no replicates: give at least one baseline and one system output")
    if len(baseline_runs) != len(system_runs):
        raise DataError(f"{len(baseline_runs)} baseline replicates but {len(system_runs)} system replicates: "
                        "replicate r of each system must come from the same seed")
    for r, (base, system) in enumerate(zip(baseline_runs, system_runs)):
        for side, hyps in (("baseline", base), ("system", system)):
            try:
                check_pair(hyps, refs)
            except DataError as err:
                raise DataError(f"{side} replicate {r + 1}: {err}") from None


def sentence_statistics(runs: Sequence[Sequence[str]], refs: Sequence[str], scorer) -> np.ndarray:
    """(replicates × sentences, statistics): each output sentence's sufficient statistics."""
    return np.concatenate([np.asarray(scorer._extract_corpus_statistics(list(hyps), [list(refs)]), dtype=np.float64)
                           for hyps in runs])


def corpus_score(scorer, statistics: np.ndarray) -> float:
    """The corpus metric of summed sufficient statistics."""
    return float(scorer._compute_score_from_stats(list(statistics)).score)


def stratified_ar(baseline_runs: Sequence[Sequence[str]], system_runs: Sequence[Sequence[str]],
                  refs: Sequence[str], metric: str = "bleu", trials: int = DEFAULT_TRIALS,
                  seed: int = 12345) -> SigResult:
    """Two-sided stratified approximate randomisation over R replicate pairs.

    `baseline` and `system` in the result are the metric on all replicates together (as
    MultEval reports it); `extra` has the replicate count, the trials and each replicate's
    own scores, whose mean and standard deviation the caller may report."""
    check_metrics([metric])
    _check_replicates(baseline_runs, system_runs, refs)
    scorer = corpus_metric(metric)
    return stratified_result(sentence_statistics(baseline_runs, refs, scorer),
                             sentence_statistics(system_runs, refs, scorer), len(baseline_runs),
                             lambda stats: corpus_score(scorer, stats), metric, trials, seed)


def stratified_result(a: np.ndarray, b: np.ndarray, replicates: int, score, metric: str,
                      trials: int = DEFAULT_TRIALS, seed: int = 12345) -> SigResult:
    """The test on (replicates × sentences, statistics) rows of the baseline (a) and the
    system (b), replicate by replicate, with `score` the corpus metric of summed rows."""
    check_seed(seed)  # as the paired tests: a positive seed (numpy refuses a negative one with a traceback)
    if trials < 1:
        raise ConfigError(f"the number of trials must be positive, not {trials}")
    base_score, system_score = score(a.sum(0)), score(b.sum(0))
    n = len(a) // replicates
    per_replicate = [(score(a[r * n:(r + 1) * n].sum(0)), score(b[r * n:(r + 1) * n].sum(0)))
                     for r in range(replicates)]
    return SigResult(test=TEST, metric=metric, baseline=base_score, system=system_score,
                     p_value=shuffled_p(a, b, score, trials, np.random.default_rng(seed)),
                     extra={"replicates": replicates, "trials": trials,
                            "baseline_replicates": [p[0] for p in per_replicate],
                            "system_replicates": [p[1] for p in per_replicate]})


def shuffled_p(a: np.ndarray, b: np.ndarray, score, trials: int, rng) -> float:
    """(1 + trials whose shuffled difference is at least the observed one) / (1 + trials);
    a small tolerance counts exact ties, which float sums may split."""
    total_a, total_b, diff = a.sum(0), b.sum(0), b - a
    observed = abs(score(total_b) - score(total_a))
    count = 0
    for start in range(0, trials, _CHUNK):
        swap = rng.random((min(_CHUNK, trials - start), len(a))) < 0.5
        moved = swap.astype(np.float64) @ diff  # what the swapped strata move from B to A
        for delta in moved:
            count += abs(score(total_b - delta) - score(total_a + delta)) >= observed - 1e-9
    return (count + 1) / (trials + 1)


def seed_t_test(differences: Sequence[float]) -> dict[str, float | None] | None:
    """Two-sided one-sample t-test that the mean per-seed difference (system − baseline of
    the same seed) is zero; None with fewer than two seeds.

    The stratified test above resamples test sentences within each seed pair, so a gain
    that a few seeds happen to share can reach p < 0.001 however much the seeds disagree.
    Here the seeds themselves are the sample (Reimers and Gurevych 2017 argue for judging
    systems over seeds): it asks whether the difference a new seed pair would show is
    non-zero on average, and with three seeds it needs a large, steady gain to say yes."""
    d = np.asarray(differences, dtype=np.float64)
    if len(d) < 2:
        return None
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0:  # identical differences: t is undefined (±inf, p = 0), or there is no difference
        t, p = None, 1.0 if mean == 0.0 else 0.0
    else:
        t = float(mean / (sd / np.sqrt(len(d))))
        p = float(2 * stats.t.sf(abs(t), len(d) - 1))
    return {"mean": mean, "sd": sd, "t": t, "df": len(d) - 1, "p_value": p,
            "detectable": smallest_detectable(sd, len(d))}


def smallest_detectable(sd: float, n: int, alpha: float = 0.05) -> float:
    """The smallest mean difference this t-test over n seed pairs would call significant
    (two-sided, p < alpha) at a spread sd of the per-seed differences: t_{1−α/2, n−1}·sd/√n.
    With the spread fixed, it shrinks with more seeds both through √n and the t quantile.  It is
    the half-width of the mean difference's 95% interval, not a difference the test would catch:
    for that, seed_t_power."""
    return float(stats.t.ppf(1 - alpha / 2, n - 1) * sd / np.sqrt(n))


def seed_t_power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float | None:
    """The chance that seed_t_test over n seed pairs calls a true mean difference `effect`
    significant (two-sided, p < alpha) when the per-seed differences spread by sd; None with
    fewer than two seeds.

    `smallest_detectable` is only the half-width of the 95% interval: a true difference of that
    size is called significant little more than half the time (0.56 with five seeds).  This is
    the t-test's power, exactly:
    t = mean/(sd'/√n) has the noncentral t distribution with n − 1 degrees of freedom and
    noncentrality effect·√n/sd, so power = P(t > c) + P(t < −c) with c = t_{1−α/2, n−1}.
    It takes sd as the true spread; with the observed spread of a few seeds it is an estimate."""
    if n < 2:
        return None
    if sd == 0.0:  # as seed_t_test: any difference is significant, none never
        return 1.0 if effect != 0.0 else 0.0
    df, noncentrality = n - 1, abs(effect) * np.sqrt(n) / sd
    critical = stats.t.ppf(1 - alpha / 2, df)
    near = stats.nct.sf(critical, df, noncentrality)
    # scipy gives nan for the far tail once it is below about 1e-15; it is at most Φ(−noncentrality)
    far = stats.nct.cdf(-critical, df, noncentrality)
    return float(near + (far if np.isfinite(far) else 0.0))
