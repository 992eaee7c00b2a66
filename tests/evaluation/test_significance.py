"""Paired significance tests on constructed systems."""
import pytest

from ctxnmt.errors import ConfigError, DataError
from ctxnmt.evaluation import significance as s

TESTS = ("bootstrap", "ar", "ttest", "sign")
METRICS = ("bleu", "chrf", "ter")


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("test", TESTS)
def test_system_against_itself_is_never_significant(corpus, test, metric):
    result = s.compare(corpus["baseline"], corpus["baseline"], corpus["refs"],
                       test=test, metric=metric, n=200)
    assert result.p_value == 1.0
    assert not result.significant()


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("test", TESTS)
def test_clearly_better_system_is_significant(corpus, test, metric):
    result = s.compare(corpus["baseline"], corpus["better"], corpus["refs"],
                       test=test, metric=metric, n=200)
    assert result.p_value < 0.05
    improved = result.system < result.baseline if metric == "ter" else result.system > result.baseline
    assert improved


def test_bootstrap_reports_sacrebleu_ci_and_signature(corpus):
    result = s.paired_bootstrap(corpus["baseline"], corpus["better"], corpus["refs"], n=200)
    centre, half = result.ci
    assert half > 0 and abs(centre - result.system) < half
    assert "bs:200" in result.signature and "seed:12345" in result.signature


def test_p_value_is_sacrebleus_own(corpus):
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    systems = [("b", corpus["baseline"]), ("s", corpus["better"])]
    _, direct = PairedTest(systems, {"BLEU": BLEU()}, [corpus["refs"]], "bs", n_samples=200)()
    ours = s.paired_bootstrap(corpus["baseline"], corpus["better"], corpus["refs"], n=200)
    assert ours.p_value == direct["BLEU"][1].p_value
    assert ours.ci == (direct["BLEU"][1].mean, direct["BLEU"][1].ci)


def test_resampling_is_reproducible_with_a_seed(corpus):
    args = (corpus["baseline"], corpus["better"], corpus["refs"])
    first = s.approximate_randomization(*args, n=200, seed=3)
    assert s.approximate_randomization(*args, n=200, seed=3) == first


def test_zero_seed_is_rejected(corpus):
    with pytest.raises(ConfigError, match="seed"):
        s.paired_bootstrap(corpus["baseline"], corpus["better"], corpus["refs"], n=10, seed=0)


def test_sign_test_counts():
    result = s.sign_test([1, 2, 3, 4, 5], [2, 2, 1, 5, 6])
    assert result.extra == {"better": 3, "worse": 1, "ties": 1}
    assert result.p_value == pytest.approx(5 / 16)  # P(X >= 3), X ~ Bin(4, 1/2)


def test_sign_test_lower_is_better():
    result = s.sign_test([1, 2, 3, 4, 5], [2, 2, 1, 5, 6], higher_is_better=False)
    assert result.extra == {"better": 1, "worse": 3, "ties": 1}


def test_t_test_known_answer():
    result = s.paired_t_test([0, 0, 0, 0], [1, 2, 3, 4])
    # mean 2.5, sd sqrt(5/3), t = 2.5 / (sd / 2) with 3 degrees of freedom.
    assert result.extra["t"] == pytest.approx(3.8729833)
    centre, half = result.ci
    assert centre == pytest.approx(2.5)
    assert half == pytest.approx(3.1824463 * (5 / 3) ** 0.5 / 2)
    assert 0.01 < result.p_value < 0.025


def test_t_test_worse_system_is_not_significant():
    assert s.paired_t_test([1, 2, 3, 4], [0, 1, 3, 3]).p_value > 0.5


def test_unequal_lengths_are_rejected(corpus):
    with pytest.raises(DataError):
        s.compare(corpus["baseline"], corpus["better"][:-1], corpus["refs"], test="sign")


def test_unknown_test_lists_valid_names(corpus):
    with pytest.raises(ConfigError, match="valid tests: bootstrap, ar, ttest, sign"):
        s.compare(corpus["baseline"], corpus["better"], corpus["refs"], test="wilcoxon")


def test_approximate_randomisation_reports_a_bootstrap_ci(corpus):
    result = s.approximate_randomization(corpus["baseline"], corpus["better"], corpus["refs"], n=200)
    centre, half = result.ci
    assert half > 0 and abs(centre - result.system) < half
    assert result.system > result.baseline and result.p_value < 0.05
