"""Stratified approximate randomisation over replicates (Clark et al. 2011) on constructed
outputs whose answer is known: an exhaustive enumeration of every shuffling, identical
systems, a seed-unstable difference and a consistent one; and the t-test over seeds
against its closed form."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF
from scipy import integrate, stats

from ctxnmt.errors import ConfigError, DataError
from ctxnmt.evaluation.replicates import seed_t_power, seed_t_test, smallest_detectable, stratified_ar

REFS = ["the cat sat on the mat", "a dog ran in the park today", "we saw the red house",
        "it rained all day long", "she reads a good book"]
GOOD = list(REFS)
BAD = ["the cat the cat", "dog dog park", "we house", "it all day", "a book she"]
MIXED = ["the cat sat on a mat", "a dog in the park today", "we saw a red house", "it rained all day",
         "she reads a book"]


def exact_p(base_runs, system_runs, refs, scorer) -> float:
    """Every one of the 2^(R·N) swaps, each re-scored from text with sacreBLEU: the exact
    two-sided p-value that the Monte-Carlo test estimates (counting the observed split)."""
    def score(runs):
        return scorer.corpus_score([h for run in runs for h in run], [refs * len(runs)]).score

    observed = abs(score(system_runs) - score(base_runs))
    strata = [(r, i) for r in range(len(base_runs)) for i in range(len(refs))]
    hits = 0
    for swaps in itertools.product([False, True], repeat=len(strata)):
        x = [list(run) for run in base_runs]
        y = [list(run) for run in system_runs]
        for (r, i), swap in zip(strata, swaps):
            if swap:
                x[r][i], y[r][i] = y[r][i], x[r][i]
        hits += abs(score(y) - score(x)) >= observed - 1e-9
    return hits / 2 ** len(strata)


@pytest.mark.parametrize("metric, scorer", [("bleu", BLEU()), ("chrf", CHRF())])
def test_monte_carlo_p_matches_the_exhaustive_enumeration(metric, scorer):
    refs = REFS[:4]
    base = [BAD[:4], MIXED[:4]]
    system = [MIXED[:4], GOOD[:4]]
    exact = exact_p(base, system, refs, scorer)
    result = stratified_ar(base, system, refs, metric, trials=10000, seed=7)
    assert 0.0 < exact < 1.0
    assert result.p_value == pytest.approx(exact, abs=0.02)  # over 4 standard errors of 10,000 trials
    assert result.system == pytest.approx(scorer.corpus_score(system[0] + system[1], [refs * 2]).score)
    assert result.extra["replicates"] == 2


def test_identical_systems_are_never_significant():
    result = stratified_ar([MIXED, BAD], [MIXED, BAD], REFS, trials=200)
    assert result.p_value == 1.0 and result.delta == 0.0


def test_a_difference_one_seed_reverses_is_not_significant_but_one_seed_alone_would_be():
    """Seed 1: the system is far better; seed 2: exactly the reverse.  One seed pair's test
    calls it significant; over both replicates the systems are equal."""
    one_seed = stratified_ar([BAD * 4], [GOOD * 4], REFS * 4, trials=2000)
    both = stratified_ar([BAD * 4, GOOD * 4], [GOOD * 4, BAD * 4], REFS * 4, trials=2000)
    assert one_seed.p_value < 0.01
    assert both.p_value > 0.5
    assert both.extra["system_replicates"][0] > both.extra["baseline_replicates"][0]
    assert both.extra["system_replicates"][1] < both.extra["baseline_replicates"][1]


def test_a_difference_every_seed_agrees_on_is_significant():
    result = stratified_ar([MIXED * 3, BAD * 3, MIXED * 3], [GOOD * 3] * 3, REFS * 3, trials=2000)
    assert result.p_value < 0.01 and result.delta > 0


def test_the_same_seed_gives_the_same_p_value():
    args = ([BAD, MIXED], [MIXED, GOOD], REFS)
    assert stratified_ar(*args, trials=500, seed=3).p_value == stratified_ar(*args, trials=500, seed=3).p_value


def test_bad_replicates_are_refused_with_a_clear_error():
    with pytest.raises(DataError, match="2 baseline replicates but 1 system replicates"):
        stratified_ar([BAD, MIXED], [GOOD], REFS)
    with pytest.raises(DataError, match="system replicate 2: 4 hypotheses but 5 references"):
        stratified_ar([BAD, MIXED], [GOOD, GOOD[:4]], REFS)
    with pytest.raises(DataError, match="no replicates"):
        stratified_ar([], [], REFS)
    with pytest.raises(ConfigError, match="trials must be positive"):
        stratified_ar([BAD], [GOOD], REFS, trials=0)


def test_seed_t_test_matches_the_closed_form_for_three_seeds():
    # differences 1, 2, 3: mean 2, sd 1, t = 2√3; with 2 degrees of freedom the two-sided
    # p-value of t is 1 − t/√(t² + 2) exactly
    result = seed_t_test([1.0, 2.0, 3.0])
    t = 2 * math.sqrt(3)
    assert (result["mean"], result["sd"], result["df"]) == (2.0, 1.0, 2)
    assert result["t"] == pytest.approx(t) and result["p_value"] == pytest.approx(1 - t / math.sqrt(t * t + 2))
    mirrored = seed_t_test([-1.0, -2.0, -3.0])  # the sign of the differences moves t, not p
    assert mirrored["t"] == pytest.approx(-t) and mirrored["p_value"] == pytest.approx(result["p_value"])


def test_seed_t_test_with_one_degree_of_freedom_is_the_cauchy_tail():
    # two seeds: t has 1 degree of freedom, whose two-sided tail is 1 − (2/π)·atan|t|
    result = seed_t_test([0.5, 1.5])
    assert result["t"] == pytest.approx(2.0) and result["p_value"] == pytest.approx(1 - 2 / math.pi * math.atan(2.0))


def test_seeds_that_disagree_are_not_significant_however_large_one_gain():
    assert seed_t_test([3.0, -1.0, 2.5])["p_value"] > 0.3
    assert seed_t_test([3.0, 2.9, 3.1])["p_value"] < 0.001


def test_seed_t_test_needs_two_seeds_and_names_a_spread_of_zero():
    assert seed_t_test([]) is None and seed_t_test([1.2]) is None
    assert seed_t_test([0.4, 0.4]) == {"mean": 0.4, "sd": 0.0, "t": None, "df": 1, "p_value": 0.0,
                                       "detectable": 0.0}
    assert seed_t_test([0.0, 0.0, 0.0])["p_value"] == 1.0


def test_the_smallest_detectable_difference_is_where_the_t_test_reaches_p_005():
    """Two seeds: t has 1 degree of freedom, whose 97.5% quantile is tan(0.475π) = 12.706;
    a mean difference of exactly that size reaches p = 0.05."""
    result = seed_t_test([0.5, 1.5])
    assert result["detectable"] == pytest.approx(math.tan(0.475 * math.pi) * math.sqrt(0.5) / math.sqrt(2))
    sd, n = 0.7, 5
    shifted = seed_t_test([x - 1.0 + smallest_detectable(sd, n) for x in (0.3, 1.7, 1.0, 0.3, 1.7)])
    assert shifted["p_value"] == pytest.approx(0.05)


def test_power_with_three_seeds_is_the_integral_over_the_sample_spread():
    """Three seeds: s²/σ² of the differences is χ²₂/2, an exponential with mean 1, so the power
    against a true difference δ is ∫ [Φ(λ − c√u) + Φ(−λ − c√u)] e^(−u) du with λ = δ√3/σ and
    c = t(0.975, 2) = 0.95/√(2 · 0.975 · 0.025): no noncentral t in it."""
    c = 0.95 / math.sqrt(2 * 0.975 * 0.025)
    assert stats.t.ppf(0.975, 2) == pytest.approx(c)
    for effect, sd in ((0.92, 0.85), (1.0, 0.35), (2.0, 1.0)):
        lam = effect * math.sqrt(3) / sd
        integral, _ = integrate.quad(
            lambda u: (stats.norm.cdf(lam - c * math.sqrt(u)) + stats.norm.cdf(-lam - c * math.sqrt(u))) * math.exp(-u),
            0, np.inf)
        assert seed_t_power(effect, sd, 3) == pytest.approx(integral, abs=1e-6)


def test_power_is_alpha_without_a_difference_and_one_far_above_the_half_width():
    assert seed_t_power(0.0, 0.5, 5) == pytest.approx(0.05)
    assert seed_t_power(-0.3, 0.5, 5) == seed_t_power(0.3, 0.5, 5)  # a loss is caught as a gain is
    assert seed_t_power(40.0, 0.5, 5) == 1.0  # the far tail scipy cannot compute is dropped, not nan
    assert seed_t_power(1.0, 0.5, 1) is None
    assert (seed_t_power(0.4, 0.0, 3), seed_t_power(0.0, 0.0, 3)) == (1.0, 0.0)


def test_a_difference_the_size_of_the_half_width_is_caught_little_more_than_half_the_time():
    sd = 0.7
    powers = [seed_t_power(smallest_detectable(sd, n), sd, n) for n in (3, 5, 30)]
    assert 0.5 < powers[2] < powers[1] < powers[0] < 0.65


def test_power_is_how_often_seed_t_test_calls_the_difference():
    rng = np.random.default_rng(7)
    effect, sd, n, draws = 0.9, 0.85, 5, 4000
    called = sum(seed_t_test(rng.normal(effect, sd, n))["p_value"] < 0.05 for _ in range(draws))
    assert called / draws == pytest.approx(seed_t_power(effect, sd, n), abs=0.025)
