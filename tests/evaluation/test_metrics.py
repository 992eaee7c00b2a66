"""Known-answer tests for corpus, sentence and length-bucket metrics."""
import math

import pytest

from ctxnmt.errors import ConfigError, DataError
from ctxnmt.evaluation import metrics as m

REFS = ["The cat sat on the mat.", "It is raining in Paris, again!"]


def test_identical_output_is_perfect():
    scores = m.score_all(REFS, REFS)
    assert scores["bleu"].value == pytest.approx(100.0)
    assert scores["chrf"].value == pytest.approx(100.0)
    assert scores["ter"].value == pytest.approx(0.0)
    assert scores[m.TOKENISED_BLEU_KEY].value == pytest.approx(100.0)


def test_bleu_carries_sacrebleu_signature_and_details():
    score = m.bleu(["The cat sat on a mat."], ["The cat sat on the mat."])
    assert "tok:13a" in score.signature and "nrefs:1" in score.signature
    assert set(score.extra) >= {"BP", "ratio", "hyp_len", "ref_len"}
    assert score.format().startswith(f"BLEU|{score.signature} = ")


# p1..p4 = 4/5, 3/4, 2/3, 1/2; BP = 1.
FOUR_GRAM_CASE = 100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25


def test_tokenized_bleu_hand_computed():
    assert m.tokenized_bleu(["a b c d e"], ["a b c d f"]).value == pytest.approx(FOUR_GRAM_CASE)


def test_tokenized_bleu_is_case_sensitive():
    assert m.tokenized_bleu(["A b c d e"], ["a b c d e"]).value == pytest.approx(FOUR_GRAM_CASE)


def test_tokenized_bleu_does_not_retokenise():
    # "e," stays one token: 5 hypothesis tokens against 6 reference tokens.
    score = m.tokenized_bleu(["a b c d e,"], ["a b c d e ,"])
    assert score.value == pytest.approx(FOUR_GRAM_CASE * math.exp(1 - 6 / 5))
    assert score.name == "tokenised BLEU (multi-bleu convention)"


def test_tokenized_bleu_is_zero_without_four_grams_like_multi_bleu():
    assert m.tokenized_bleu(["a b c"], ["a b c"]).value == 0.0


def test_moses_tokenize_splits_punctuation_without_escaping():
    assert m.moses_tokenize(["Hello, world! Don't."], "en") == ["Hello , world ! Don 't ."]


def test_length_mismatch_is_a_data_error():
    with pytest.raises(DataError, match="2 hypotheses but 1 references"):
        m.bleu(["a", "b"], ["a"])


def test_unknown_metric_lists_valid_names():
    with pytest.raises(ConfigError, match="unknown metric meteor; valid metrics: bleu, chrf, ter"):
        m.score_all(REFS, REFS, metrics=("bleu", "meteor"))


def test_score_all_adds_tokenised_bleu_only_with_bleu():
    assert set(m.score_all(REFS, REFS, metrics=("chrf",))) == {"chrf"}
    assert set(m.score_all(REFS, REFS, metrics=("bleu",))) == {"bleu", m.TOKENISED_BLEU_KEY}


def test_sentence_scores_use_effective_order():
    # A perfect two-word sentence has no 3/4-grams; effective order still gives 100.
    assert m.sentence_scores(["hi there"], ["hi there"], "bleu") == [pytest.approx(100.0)]
    assert m.sentence_scores(["a b"], ["a b"], "ter") == [pytest.approx(0.0)]


SRCS = ["w " * 3, "w " * 9, "w " * 10, "w " * 15, "w " * 25]
HYPS = ["a b", "a b c d", "a", "x y z", "p q r s t u"]


def test_length_buckets_assign_by_source_words():
    buckets = m.length_buckets(SRCS, HYPS, HYPS, width=10)
    assert [(b.lo, b.hi, b.count) for b in buckets] == [(0, 10, 2), (10, 20, 2), (20, 30, 1)]
    assert buckets[0].avg_hyp_len == pytest.approx(3.0)
    assert buckets[1].avg_ref_len == pytest.approx(2.0)
    assert [b.label for b in buckets] == ["0-9", "10-19", "20-29"]


def test_length_buckets_cap_merges_the_tail():
    buckets = m.length_buckets(SRCS, HYPS, HYPS, width=5, cap=10)
    assert [(b.lo, b.count) for b in buckets] == [(0, 1), (5, 1), (10, 3)]
    assert math.isinf(buckets[-1].hi) and buckets[-1].label == "10+"


def test_length_buckets_bleu_per_bucket():
    refs = ["the cat sat on the mat today"] * 5
    hyps = list(refs)
    hyps[4] = "completely different words here"
    buckets = m.length_buckets(SRCS, hyps, refs)
    assert [b.bleu for b in buckets[:2]] == [pytest.approx(100.0)] * 2
    assert buckets[2].bleu == pytest.approx(0.0)


def test_plot_length_buckets_writes_png(tmp_path):
    buckets = m.length_buckets(SRCS, HYPS, HYPS)
    out = tmp_path / "buckets.png"
    m.plot_length_buckets({"base": buckets, "ctx": buckets}, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_length_bucket_table_has_bleu_and_length_per_system():
    refs = ["the cat sat on the mat today"] * 5
    hyps = list(refs)
    hyps[4] = "completely different words here"
    table = m.format_length_buckets({"base": m.length_buckets(SRCS, refs, refs),
                                     "ctx": m.length_buckets(SRCS, hyps, refs)}).splitlines()
    assert table[0] == ("| source words | sentences | reference length | base BLEU | base length | ctx BLEU "
                        "| ctx length |")
    assert table[2] == "| 0-9 | 2 | 7.0 | 100.00 | 7.0 | 100.00 | 7.0 |"
    assert table[4] == "| 20-29 | 1 | 7.0 | 100.00 | 7.0 | 0.00 | 4.0 |"


def test_mean_buckets_average_seeds_bucket_by_bucket():
    refs = ["the cat sat on the mat today"] * 5
    worse = list(refs)
    worse[4] = "completely different words here"
    mean = m.mean_buckets([m.length_buckets(SRCS, refs, refs), m.length_buckets(SRCS, worse, refs)])
    assert [(b.label, b.count) for b in mean] == [("0-9", 2), ("10-19", 2), ("20-29", 1)]
    assert mean[2].bleu == pytest.approx(50.0) and mean[2].avg_hyp_len == pytest.approx(5.5)
    assert mean[0].bleu == pytest.approx(100.0)
    with pytest.raises(DataError, match="same source"):
        m.mean_buckets([m.length_buckets(SRCS, refs, refs), m.length_buckets(SRCS[:4], refs[:4], refs[:4])])
