"""Length control: the GNMT length and coverage penalties against Wu et al. (2016) eq. 14
written out, beam search's scores with them (its incremental coverage against the attention
it returns), the output limit, the training data's length ratios, and bad values refused at
the command line and by the config (the server's are in tests/serve)."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from ctxnmt.cli import main
from ctxnmt.config import DecodingConfig, ModelConfig
from ctxnmt.errors import ConfigError
from ctxnmt.data.batching import pad
from ctxnmt.data.indexed import Side, TokenArrays
from ctxnmt.data.prepare import length_ratios, load_prepared
from ctxnmt.data.vocab import EOS
from ctxnmt.data.words import WordBoundaries, count_words, goes_on, word_starts
from ctxnmt.decoding import beam as search_module
from ctxnmt.decoding.beam import search_batches
from ctxnmt.decoding.length import LengthControl, coverage_penalty, length_control
from ctxnmt.models.nmt import build_model
from tests.decoding.search import search_batch
from tests.decoding.test_beam import SRC, random_model, sequence_logprob
from tests.test_cli import small_corpus, write_config


def gnmt_lp(length: int, alpha: float) -> float:
    """Wu et al. 2016, eq. 14: lp(Y) = (5 + |Y|)^α / (5 + 1)^α."""
    return (5 + length) ** alpha / (5 + 1) ** alpha


def gnmt_cp(attention: list[list[float]], beta: float) -> float:
    """Wu et al. 2016, eq. 14: cp(X; Y) = β · Σ_{i=1}^{|X|} log(min(Σ_{j=1}^{|Y|} p_{i,j}, 1.0)),
    p_{i,j} the attention of the j-th target word on the i-th source word: attention[j][i]."""
    sources = range(len(attention[0]))
    return beta * sum(math.log(min(sum(row[i] for row in attention), 1.0)) for i in sources)


def eq_14_score(h, sent: list[int], kind: str, alpha: float, beta: float) -> float:
    """log P(y|x) / lp(y) + cp(x; y) of hypothesis `h` of source `sent`, from its own
    log-probability and returned attention (|y| counts its </s>)."""
    n = len(h.tokens) + 1
    lp = gnmt_lp(n, alpha) if kind == "wu" else n ** alpha
    return h.logprob / lp + gnmt_cp(h.attention[:, :len(sent)].tolist(), beta)


@pytest.mark.parametrize("alpha", [0.2, 0.6, 1.0, 2.0])
def test_the_wu_length_penalty_is_eq_14_and_power_is_today_s(alpha):
    for length in range(1, 60):
        assert LengthControl("wu", alpha).lp(length) == pytest.approx(gnmt_lp(length, alpha), rel=1e-12)
        assert LengthControl("power", alpha).lp(length) == length ** alpha
        assert LengthControl("none", alpha).lp(length) == LengthControl("wu", 0.0).lp(length) == 1.0


def test_the_coverage_penalty_is_eq_14_over_the_real_source_words():
    torch.manual_seed(0)
    lens, steps, width = [5, 3], 7, 8
    rows = []
    for n in lens:  # attention over n real source words, zero on the padding
        att = torch.zeros(steps, width)
        att[:, :n] = torch.softmax(3 * torch.randn(steps, n), -1)
        rows.append(att)
    coverage = torch.stack([att.sum(0) for att in rows])
    got = coverage_penalty(coverage, torch.tensor(lens), 0.3)
    for k, (att, n) in enumerate(zip(rows, lens)):
        assert float(got[k]) == pytest.approx(gnmt_cp(att[:, :n].tolist(), 0.3), rel=1e-5)
    real = torch.cat([coverage[0, :5], coverage[1, :3]])
    assert (real > 1).any() and (real < 1).any()  # both sides of the min(·, 1.0) are exercised


@pytest.mark.parametrize("kind, alpha, beta", [("wu", 0.6, 0.4), ("power", 1.0, 1.5), ("none", 0.0, 0.2)])
def test_each_hypothesis_score_is_eq_14_of_its_own_attention(kind, alpha, beta):
    """The coverage the search sums step by step (reordered with its beams) against the
    attention it returns, summed at once; the log-probability against a forced decode."""
    model = random_model(2)
    length = LengthControl(kind, alpha, beta)
    for sent, hyps in zip(SRC, search_batch(model, *pad(SRC), beam=4, nbest=4, length=length,
                                           return_attention=True)):
        assert len(hyps) >= 2
        for h in hyps:
            assert h.logprob == pytest.approx(sequence_logprob(model, sent, h.tokens), abs=1e-4)
            assert h.score == pytest.approx(eq_14_score(h, sent, kind, alpha, beta), abs=1e-4)
        assert [h.score for h in hyps] == sorted([h.score for h in hyps], reverse=True)


def test_the_coverage_penalty_changes_the_choice_and_needs_no_returned_attention():
    model = random_model(2)
    plain = search_batch(model, *pad(SRC), beam=4, nbest=4, length=LengthControl(beta=0.0))
    kept = search_batch(model, *pad(SRC), beam=4, nbest=4, length=LengthControl(beta=2.0))
    returned = search_batch(model, *pad(SRC), beam=4, nbest=4, length=LengthControl(beta=2.0), return_attention=True)
    assert [[h.tokens for h in s] for s in kept] == [[h.tokens for h in s] for s in returned]
    scores = [[h.score for h in s] for s in (*kept, *returned)]
    assert scores[:len(SRC)] == [pytest.approx(s, abs=1e-5) for s in scores[len(SRC):]]
    assert [[h.tokens for h in s] for s in kept] != [[h.tokens for h in s] for s in plain]


def test_without_a_coverage_penalty_no_coverage_is_kept(monkeypatch):
    def refuse(*args):
        raise AssertionError("coverage computed with β = 0")

    monkeypatch.setattr(search_module, "coverage_penalty", refuse)
    parts, advance = [], search_module._Search.advance
    monkeypatch.setattr(search_module._Search, "advance", lambda self, part: parts.append(part) or advance(self, part))
    search_batch(random_model(2), *pad(SRC), beam=3, length=LengthControl("wu", 0.6))
    assert parts and all(p.coverage is None for p in parts)


def _in_batches(model, sources, refill_below, length):
    batches = [(list(range(i, min(i + 4, len(sources)))), *pad(sources[i:i + 4]), None)
               for i in range(0, len(sources), 4)]
    return search_batches(model, batches, 1, length=length, refill_below=refill_below)


def test_coverage_survives_batches_joining(monkeypatch):
    """Greedy search refills (a later batch joins the tail of the one before, with wider
    source padding): each sentence's hypothesis and score with a coverage penalty are unchanged."""
    torch.manual_seed(6)  # the setup of tests/decoding/test_beam.py's refill test
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8, init="pytorch"), 16, 16)
    with torch.no_grad():
        model.generator.bias[EOS] += 0.3  # some end at once, others run to their length limits
    model.eval()
    sources = [torch.randint(4, 16, (n,)).tolist() for n in [9, 8, 8, 7, 3, 3, 2, 2, 2, 1, 1]]
    length = LengthControl("wu", 0.6, 0.5)
    alone = _in_batches(model, sources, 0, length)
    joins, join = [], search_module._join
    monkeypatch.setattr(search_module, "_join", lambda a, b: joins.append(join(a, b)) or joins[-1])
    joined = _in_batches(model, sources, 3, length)
    assert joins and all(j is not None and j.coverage.shape == (len(j.active), j.width) for j in joins)
    for i in alone:
        assert [h.tokens for h in joined[i]] == [h.tokens for h in alone[i]]
        assert joined[i][0].score == pytest.approx(alone[i][0].score, abs=1e-5)


def test_a_large_alpha_prefers_longer_outputs():
    model = random_model(3)
    with torch.no_grad():
        model.generator.bias[EOS] -= 1.0  # by raw log-probability </s> alone is best for every sentence here
    lengths = {}
    for kind, alpha in (("power", 0.0), ("power", 1.0), ("power", 4.0), ("wu", 4.0)):
        found = search_batch(model, *pad(SRC), beam=6, length=LengthControl(kind, alpha))
        lengths[kind, alpha] = [len(h[0].tokens) for h in found]
    assert lengths["power", 0.0] == [0] * len(SRC)
    for shorter, longer in ((("power", 0.0), ("power", 1.0)), (("power", 1.0), ("power", 4.0))):
        assert all(a <= b for a, b in zip(lengths[shorter], lengths[longer]))
        assert sum(lengths[shorter]) < sum(lengths[longer])
    assert all(n > 0 for n in lengths["wu", 4.0])


def _ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def test_repeats_an_ngram_names_the_words_that_would_repeat_one():
    """Written from the definition: w after y_1…y_t repeats an n-gram iff (y_{t−n+2}, …, y_t, w)
    is among the n-grams of y_1…y_t; rows are left-padded, only their last `steps` words count."""
    history = torch.tensor([[0, 0, 5, 6, 7, 5, 6], [1, 2, 3, 1, 2, 3, 1], [9, 9, 9, 4, 4, 8, 4]])
    steps = torch.tensor([5, 7, 4])
    words = torch.tensor([[7, 6, 5], [2, 3, 1], [4, 8, 9]])
    for n in (1, 2, 3, 4):
        got = search_module.repeats_an_ngram(history, steps, words, n)
        for r in range(3):
            real = history[r, history.size(1) - int(steps[r]):].tolist()
            held = set(_ngrams(real, n))
            expected = [tuple((real + [int(w)])[-n:]) in held if len(real) >= n else False for w in words[r]]
            assert got[r].tolist() == expected, (n, r)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_blocking_leaves_no_repeated_ngram_and_zero_changes_nothing(n):
    """A model whose outputs repeat themselves: with block_ngram_repeat = n no output holds an
    n-gram twice; with 0 search is as before."""
    model = random_model(4)
    with torch.no_grad():
        model.generator.bias[EOS] -= 4.0  # long outputs, which a random model fills with repeats
    src = pad(SRC)
    plain = search_batch(model, *src, beam=4, length=LengthControl("power", 1.0, max_len_a=1.0, max_len_b=4))
    assert any(len(set(_ngrams(h[0].tokens, n))) < len(_ngrams(h[0].tokens, n)) for h in plain)
    zero = search_batch(model, *src, beam=4, length=LengthControl("power", 1.0, max_len_a=1.0, max_len_b=4,
                                                                 block_ngram_repeat=0))
    assert [h[0].tokens for h in zero] == [h[0].tokens for h in plain]
    blocked = search_batch(model, *src, beam=4, length=LengthControl("power", 1.0, max_len_a=1.0, max_len_b=4,
                                                                    block_ngram_repeat=n))
    for hyps in blocked:
        grams = _ngrams(hyps[0].tokens, n)
        assert hyps[0].score > -1e8 and len(set(grams)) == len(grams), hyps[0].tokens


@pytest.mark.parametrize("a, b", [(0.5, 1), (0.0, 3), (1.5, 0), (2.0, 10)])
def test_the_output_limit_is_a_times_the_source_length_plus_b(a, b):
    model = random_model(4)
    with torch.no_grad():
        model.generator.bias[EOS] -= 50.0  # never ends by itself: every output meets the limit
    for sent, hyps in zip(SRC, search_batch(model, *pad(SRC), beam=2, length=LengthControl(max_len_a=a, max_len_b=b))):
        assert len(hyps[0].tokens) == max(1, math.floor(a * len(sent)) + b)


def test_length_ratios_are_quantiles_of_the_training_pairs():
    src = [[1] * n for n in (1, 2, 4, 5, 10, 3, 7)]
    tgt = [[2] * m + [EOS] for m in (3, 2, 5, 5, 8, 9, 7)]
    ratios = sorted(m / n for m, n in zip((3, 2, 5, 5, 8, 9, 7), (1, 2, 4, 5, 10, 3, 7)))
    found = length_ratios(TokenArrays.from_lists(src, tgt))
    assert found["1"] == max(ratios) == 3.0 and found["0.5"] == ratios[3]
    for key, value in found.items():  # the smallest ratio at least that share of pairs stay within
        within = sum(r <= value for r in ratios) / len(ratios)
        assert within >= float(key) and sum(r < value for r in ratios) / len(ratios) < float(key)


def test_the_data_rule_takes_a_from_the_ratios_or_keeps_max_len_a_with_a_warning():
    dec = DecodingConfig(max_len_rule="data", max_len_a=1.7, max_len_b=4, length_penalty_kind="wu", length_penalty=1.0)
    assert length_control(dec, {"0.99": 1.25}) == LengthControl("wu", 1.0, 0.0, 1.25, 4)
    warnings = []
    assert length_control(dec, None, warnings.append).max_len_a == 1.7
    assert len(warnings) == 1 and "no training length ratios" in warnings[0]
    before = DecodingConfig(length_penalty_kind="power", length_penalty=1.0, max_len_rule="fixed", max_len_b=10)
    # the defaults the experiments that ran before the sweep pin: 2·|x| + 10
    assert length_control(before, {"0.99": 1.25}) == LengthControl("power", 1.0, max_len_b=10)
    # the shipped defaults (docs/decoding.md): GNMT's penalty, α = 0.6, a from the data, b = 5
    assert length_control(DecodingConfig(), {"0.99": 1.25}) == LengthControl("wu", 0.6, 0.0, 1.25, 5)


# -- the length-ratio prior (ours) ------------------------------------------------------

# Which of the 16 test subwords "go on" into the next (end with "@@"): 4–7 do, on both sides.
GOES_ON = [False] * 4 + [True] * 4 + [False] * 8
BOUNDARIES = WordBoundaries(torch.tensor(GOES_ON), torch.tensor(GOES_ON))


def words_of(ids: list[int]) -> int:
    """Words written out: a subword starts one unless the subword before it goes on."""
    return sum(1 for i, tok in enumerate(ids) if i == 0 or not GOES_ON[ids[i - 1]])


def test_words_are_counted_across_subwords_and_padding():
    seqs = [[8, 5, 6, 9, 10], [4], [], [9, 9, 4, 4]]  # 8 | 5 6 9 | 10 and 9 | 9 | 4 4: a word cut short still counts
    found = count_words(Side.from_lists(seqs), BOUNDARIES.tgt_continues).tolist()
    assert found == [words_of(s) for s in seqs] == [3, 1, 0, 3]
    assert count_words(Side.from_lists([]), BOUNDARIES.tgt_continues).tolist() == []
    from ctxnmt.data import words as words_module

    many = seqs * 5
    words_module.CHUNK, chunk = 3, words_module.CHUNK  # padded a few at a time, counted the same
    try:
        assert count_words(Side.from_lists(many), BOUNDARIES.tgt_continues).tolist() == [words_of(s) for s in many]
    finally:
        words_module.CHUNK = chunk
    rows = [[8, 5, 6, 9, 10], [0, 0, 4, 5, 12], [0, 0, 0, 0, 0]]  # left-padded, as search's histories
    real = torch.tensor([[True] * 5, [False, False, True, True, True], [False] * 5])
    assert word_starts(torch.tensor(rows), real, BOUNDARIES.tgt_continues).tolist() == [3, 1, 0]


def test_the_training_word_ratio_is_the_median_over_the_pairs():
    from ctxnmt.data.vocab import Vocab

    vocab = Vocab(["new@@", "found@@", "land", "a", "b@@", "c"])  # ids 4–9
    assert goes_on(vocab).tolist() == [False] * 4 + [True, True, False, False, True, False]
    src = [[7], [7, 8], [4, 6, 7], [8, 9, 8, 9]]  # 1, 2, 2 and 2 words
    tgt = [[7, 8, EOS], [4, 5, 6, EOS], [7, 7, 7, 7, EOS], [8, 9, EOS]]  # 2, 1, 4 and 1 words
    found = length_ratios(TokenArrays.from_lists(src, tgt), vocab, vocab)
    assert found["words 0.5"] == sorted([2 / 1, 1 / 2, 4 / 2, 1 / 2])[1] == 0.5
    assert found["0.5"] == length_ratios(TokenArrays.from_lists(src, tgt))["0.5"]  # the subword quantiles unchanged


def prior(words: int, src_words: int, lam: float, r: float) -> float:
    """−λ·|log(W(y) / (r·W(x)))|, an empty output counted as half a word."""
    return -lam * abs(math.log(max(words, 0.5) / (r * src_words)))


def test_the_prior_is_minus_lambda_times_the_log_ratio_s_distance_from_r():
    control = LengthControl("wu", 0.6, ratio_penalty=2.5, ratio=1.2, words=BOUNDARIES)
    words, src_words = torch.tensor([0, 3, 6, 12]), torch.tensor([5, 5, 5, 5])
    expected = [prior(w, 5, 2.5, 1.2) for w in (0, 3, 6, 12)]
    assert control.ratio_prior(words, src_words).tolist() == pytest.approx(expected, abs=1e-12)
    assert expected[1] == pytest.approx(-2.5 * math.log(2), abs=1e-12)  # half r·W(x) costs as twice it
    assert expected[3] == pytest.approx(-2.5 * math.log(2), abs=1e-12)
    reachable = [min(0.0, prior(w, 5, 2.5, 1.2)) if w > 6 else 0.0 for w in (0, 3, 6, 12)]  # shorter: r still ahead
    assert control.ratio_prior(words, src_words, reachable=True).tolist() == pytest.approx(reachable, abs=1e-12)
    with pytest.raises(ValueError, match="counts words"):
        LengthControl(ratio_penalty=1.0)


@pytest.mark.parametrize("kind, alpha, beta, lam, r", [("wu", 0.6, 0.0, 2.0, 1.0), ("power", 1.0, 0.3, 5.0, 0.5),
                                                      ("none", 0.0, 0.0, 8.0, 2.0)])
def test_each_hypothesis_score_adds_the_prior_of_its_own_words(kind, alpha, beta, lam, r):
    """s = log P / lp + cp − λ·|log(W(y) / (r·W(x)))| for every hypothesis returned, its
    log-probability a forced decode's and W counted by `words_of` above."""
    model = random_model(4)
    length = LengthControl(kind, alpha, beta, ratio_penalty=lam, ratio=r, words=BOUNDARIES)
    for sent, hyps in zip(SRC, search_batch(model, *pad(SRC), beam=3, nbest=20, length=length,
                                           return_attention=True)):
        assert len(hyps) >= 3
        for h in hyps:
            assert h.logprob == pytest.approx(sequence_logprob(model, sent, h.tokens), abs=1e-4)
            expected = eq_14_score(h, sent, kind, alpha, beta) + prior(words_of(h.tokens), words_of(sent), lam, r)
            assert h.score == pytest.approx(expected, abs=1e-4)
        assert [h.score for h in hyps] == sorted([h.score for h in hyps], reverse=True)


def test_the_prior_finds_ends_outside_the_k_best_and_pulls_the_ratio_to_r():
    """With </s> made unlikely, the K best never end early; the prior still finds the rows'
    </s> wherever they rank, and a strong one brings each output's word ratio nearer r."""
    model = random_model(5)
    with torch.no_grad():
        model.generator.bias[EOS] -= 4.0
    sources = SRC + [[5, 9, 10, 11, 12, 13, 14, 15, 9, 10]]
    plain = search_batch(model, *pad(sources), beam=2, length=LengthControl("wu", 0.6, max_len_a=3.0, max_len_b=5))
    for r in (0.5, 1.0):
        pulled = search_batch(model, *pad(sources), beam=2, length=LengthControl(
            "wu", 0.6, max_len_a=3.0, max_len_b=5, ratio_penalty=50.0, ratio=r, words=BOUNDARIES))
        gap = [[abs(math.log(max(words_of(h[0].tokens), 0.5) / (r * words_of(s)))) for h, s in zip(found, sources)]
               for found in (plain, pulled)]
        assert all(b <= a + 1e-9 for a, b in zip(*gap)) and sum(gap[1]) < sum(gap[0])
    assert [h[0].tokens for h in search_batch(model, *pad(sources), beam=2, length=LengthControl(
        "wu", 0.6, max_len_a=3.0, max_len_b=5, ratio=0.5, words=BOUNDARIES))] == [h[0].tokens for h in plain]


@pytest.mark.parametrize("lam", [0.0, 5.0])
def test_search_keeps_only_the_best_finished_and_returns_what_keeping_all_would(lam, monkeypatch):
    """A prior ends K rows a step: the search keeps max(K, nbest) finished hypotheses per
    sentence, and returns the same ones, in the same order, as one that keeps them all."""
    model = random_model(7)
    length = LengthControl("wu", 0.6, 0.2, ratio_penalty=lam, ratio=1.0, words=BOUNDARIES)
    everything = search_batch(model, *pad(SRC), beam=3, nbest=10_000, length=length)
    held, settle = [], search_module._Sentence.settle
    monkeypatch.setattr(search_module._Sentence, "settle", lambda s: settle(s) or held.append(len(s.finished)))
    best = search_batch(model, *pad(SRC), beam=3, nbest=3, length=length)
    assert held and max(held) == 3
    assert max(len(h) for h in everything) > 3  # more ended than are kept
    for kept, every in zip(best, everything):
        assert [(h.tokens, h.score) for h in kept] == [(h.tokens, h.score) for h in every[:3]]


def test_the_prior_survives_batches_joining(monkeypatch):
    """Joined rows are left-padded: each row's words are counted over its own steps only."""
    torch.manual_seed(6)
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8, init="pytorch"), 16, 16)
    model.eval()
    sources = [torch.randint(4, 16, (n,)).tolist() for n in [9, 8, 8, 7, 3, 3, 2, 2, 2, 1, 1]]
    length = LengthControl("wu", 0.6, 0.5, ratio_penalty=3.0, ratio=0.8, words=BOUNDARIES)
    alone = _in_batches(model, sources, 0, length)
    joins, join = [], search_module._join
    monkeypatch.setattr(search_module, "_join", lambda a, b: joins.append(join(a, b)) or joins[-1])
    joined = _in_batches(model, sources, 3, length)
    assert joins and any(j is not None for j in joins)
    for i in alone:
        assert [h.tokens for h in joined[i]] == [h.tokens for h in alone[i]]
        assert joined[i][0].score == pytest.approx(alone[i][0].score, abs=1e-5)


def test_the_prior_takes_r_from_the_training_words_or_keeps_length_ratio_with_a_warning():
    dec = DecodingConfig(length_ratio_penalty=4.0, length_ratio=0.9)
    ratios = {"0.99": 1.25, "words 0.5": 1.13}
    control = length_control(dec, ratios, words=BOUNDARIES)
    assert (control.ratio_penalty, control.ratio, control.words) == (4.0, 1.13, BOUNDARIES)
    warnings = []
    assert length_control(dec, {"0.99": 1.25}, warnings.append, BOUNDARIES).ratio == 0.9  # recorded before words
    assert len(warnings) == 1 and "length_ratio_rule data: no training word ratios" in warnings[0]
    fixed = dataclasses.replace(dec, length_ratio_rule="fixed")
    assert length_control(fixed, ratios, words=BOUNDARIES).ratio == 0.9
    assert length_control(DecodingConfig(), ratios).ratio_penalty == 0.0  # off by default


# -- the command line and validation, on a tiny trained model ---------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("length")
    cfg = write_config(tmp / "c.yaml", small_corpus(tmp), tmp / "m")
    assert main([str(a) for a in ["train", cfg, "--quiet", "--set", "training.max_updates=2",
                                  "--set", "training.valid_bleu=false", "--set", "training.threads=1",
                                  # every product of this tiny model in int8, not only those of a million multiply-adds
                                  "--set", "decoding.int8_from=0"]]) == 0
    (tmp / "in.es").write_text("el gato 3 .\nel gato 5 . el gato 6 .\n")
    return tmp


def translate(tiny, capsys, *options):
    code = main([str(a) for a in ["translate", tiny / "m", "-i", tiny / "in.es", "--attention",
                                  tiny / "att.jsonl", *options]])
    _, err = capsys.readouterr()
    rows = [json.loads(line) for line in (tiny / "att.jsonl").read_text().splitlines()] if code == 0 else []
    return code, err, rows


def test_prepare_records_the_training_length_ratios(tiny):
    recorded = json.loads((tiny / "m" / "prep" / "lengths.json").read_text())
    prepared = load_prepared(tiny / "m" / "prep")
    assert recorded == length_ratios(prepared.train, prepared.src_vocab, prepared.tgt_vocab)
    assert "words 0.5" in recorded and "words 0.5" not in length_ratios(prepared.train)


def test_translate_caps_outputs_with_the_max_len_flags(tiny, capsys):
    code, _, rows = translate(tiny, capsys, "--max-len-a", "0", "--max-len-b", "2")
    assert code == 0 and all(len(r["out"]) <= 3 for r in rows)  # two subwords and </s>
    code, _, rows = translate(tiny, capsys, "--max-len-a", "0.25", "--max-len-b", "0", "--length-penalty-kind", "wu",
                              "--length-penalty", "5", "--coverage-penalty", "0.2")
    assert code == 0 and all(len(r["out"]) <= max(1, len(r["src"]) // 4) + 1 for r in rows)


def test_the_data_rule_reads_the_recorded_ratios_and_older_directories_fall_back(tiny, capsys, monkeypatch):
    from ctxnmt.decoding import translator as translator_module

    seen = []
    real = translator_module.search_batches
    monkeypatch.setattr(translator_module, "search_batches",
                        lambda *args, **kw: seen.append(args[4]) or real(*args, **kw))
    recorded = json.loads((tiny / "m" / "prep" / "lengths.json").read_text())
    code, err, _ = translate(tiny, capsys, "--max-len-rule", "data", "--max-len-b", "3")
    assert code == 0 and seen[-1].max_len_a == recorded["0.99"] and seen[-1].max_len_b == 3 and err == ""
    (tiny / "m" / "prep" / "lengths.json").rename(tiny / "lengths.json")  # prepared before it was recorded
    try:
        code, err, _ = translate(tiny, capsys, "--max-len-rule", "data")
        assert code == 0 and seen[-1].max_len_a == recorded["0.99"] and err == ""  # measured on the prepared pairs
        (tiny / "m" / "prep" / "train").rename(tiny / "train")
        code, err, _ = translate(tiny, capsys, "--max-len-rule", "data")
        assert code == 0 and seen[-1].max_len_a == 2.0
        assert err.count("warning: max_len_rule data: no training length ratios") == 1
    finally:
        (tiny / "lengths.json").rename(tiny / "m" / "prep" / "lengths.json")
        if (tiny / "train").exists():
            (tiny / "train").rename(tiny / "m" / "prep" / "train")


def test_the_prior_reads_the_recorded_word_ratio_and_older_directories_measure_it(tiny, capsys, monkeypatch):
    from ctxnmt.decoding import translator as translator_module

    seen = []
    real = translator_module.search_batches
    monkeypatch.setattr(translator_module, "search_batches",
                        lambda *args, **kw: seen.append(args[4]) or real(*args, **kw))
    path = tiny / "m" / "prep" / "lengths.json"
    recorded = json.loads(path.read_text())
    code, err, rows = translate(tiny, capsys, "--length-ratio-penalty", "4")
    assert code == 0 and err == "" and seen[-1].ratio == recorded["words 0.5"] and seen[-1].ratio_penalty == 4.0
    assert rows and all(r["out"] for r in rows)
    code, _, _ = translate(tiny, capsys, "--length-ratio-penalty", "4", "--length-ratio", "0.7")
    assert code == 0 and seen[-1].ratio == 0.7  # a given ratio is the one used
    path.write_text(json.dumps({k: v for k, v in recorded.items() if k != "words 0.5"}))  # written before words
    (tiny / "m" / "prep" / "train").rename(tiny / "train")
    try:
        code, err, _ = translate(tiny, capsys, "--length-ratio-penalty", "4")
        assert code == 0 and seen[-1].ratio == DecodingConfig().length_ratio
        assert err.count("warning: length_ratio_rule data: no training word ratios") == 1
        (tiny / "train").rename(tiny / "m" / "prep" / "train")
        code, err, _ = translate(tiny, capsys, "--length-ratio-penalty", "4")
        assert code == 0 and err == "" and seen[-1].ratio == recorded["words 0.5"]  # measured on the prepared pairs
    finally:
        path.write_text(json.dumps(recorded))
        if (tiny / "train").exists():
            (tiny / "train").rename(tiny / "m" / "prep" / "train")


BAD_FLAGS = [
    (["--length-penalty", "-0.5"], "--length-penalty must be between 0 and 10, not -0.5"),
    (["--length-penalty", "nan"], "--length-penalty must be between 0 and 10"),
    (["--length-penalty-kind", "gnmt"], "--length-penalty-kind must be one of power, wu, none, not 'gnmt'"),
    (["--coverage-penalty", "11"], "--coverage-penalty must be between 0 and 10, not 11.0"),
    (["--max-len-a", "-1"], "--max-len-a must be between 0 and 10, not -1.0"),
    (["--max-len-b", "1001"], "--max-len-b must be between 0 and 1000, not 1001"),
    (["--max-len-a", "0", "--max-len-b", "0"], "--max-len-b must be at least 1 when --max-len-a is 0"),
    (["--max-len-rule", "ratio"], "--max-len-rule must be one of fixed, data, not 'ratio'"),
    (["--max-len-rule", "data", "--max-len-a", "1.5"], "--max-len-a has no effect with --max-len-rule data"),
    (["--block-ngram-repeat", "-1"], "--block-ngram-repeat must be between 0 and 10, not -1"),
    (["--block-ngram-repeat", "11"], "--block-ngram-repeat must be between 0 and 10, not 11"),
    (["--length-ratio-penalty", "-1"], "--length-ratio-penalty must be between 0 and 100, not -1.0"),
    (["--length-ratio", "0"], "--length-ratio must be between 0.05 and 10, not 0.0"),
    (["--length-ratio-rule", "median"], "--length-ratio-rule must be one of fixed, data, not 'median'"),
    (["--length-ratio-rule", "data", "--length-ratio", "1.2"], "--length-ratio has no effect with --length-ratio-rule data"),
]


@pytest.mark.parametrize("flags, message", BAD_FLAGS, ids=[" ".join(f) for f, _ in BAD_FLAGS])
@pytest.mark.parametrize("command", ["translate", "serve"])
def test_bad_flags_are_one_line_errors_naming_the_flag(tiny, capsys, command, flags, message):
    code = main([command, str(tiny / "m"), *flags])
    _, err = capsys.readouterr()
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_validation_decodes_with_the_config_s_length_settings(tiny, capsys, monkeypatch):
    from ctxnmt.decoding import translator as translator_module

    seen = []
    real = translator_module.search_batches
    monkeypatch.setattr(translator_module, "search_batches",
                        lambda *args, **kw: seen.append(args[4]) or real(*args, **kw))
    cfg = tiny / "c.yaml"
    args = ["train", cfg, "--quiet", "--set", f"model_dir={tiny / 'v'}", "--set", "training.max_updates=2",
            "--set", "training.valid_every=2", "--set", "training.threads=1"]
    for item in ("length_penalty_kind=wu", "length_penalty=0.6", "coverage_penalty=0.2", "max_len_rule=data",
                 "max_len_b=3"):
        args += ["--set", f"decoding.{item}"]
    assert main([str(a) for a in args]) == 0
    ratio = length_ratios(load_prepared(tiny / "v" / "prep").train)["0.99"]
    assert seen and set(seen) == {LengthControl("wu", 0.6, 0.2, ratio, 3)}
    # the length-ratio prior too, r from the training pairs' words and the vocabularies' boundaries
    seen.clear()
    args[4] = f"model_dir={tiny / 'w'}"
    assert main([str(a) for a in [*args, "--set", "decoding.length_ratio_penalty=3"]]) == 0
    prepared = load_prepared(tiny / "w" / "prep")
    words = length_ratios(prepared.train, prepared.src_vocab, prepared.tgt_vocab)["words 0.5"]
    assert seen and all(c.ratio_penalty == 3.0 and c.ratio == words for c in seen)
    assert seen[0].words.tgt_continues.tolist() == [t.endswith("@@") for t in prepared.tgt_vocab.tokens()]


def test_a_given_a_binds_whatever_rule_the_config_has():
    """The shipped rule is data; fairseq's users pass --max-len-a and expect it to bind."""
    from ctxnmt.length_options import with_options

    assert DecodingConfig().max_len_rule == "data"
    given = with_options(DecodingConfig(), {"max_len_a": 1.0, "max_len_b": None})
    assert (given.max_len_rule, given.max_len_a) == ("fixed", 1.0)
    assert length_control(given, {"0.99": 1.25}).max_len_a == 1.0
    assert with_options(DecodingConfig(), {"max_len_b": 3}).max_len_rule == "data"  # b alone keeps the rule


def test_the_cuda_graphs_flag_needs_cuda_and_reaches_the_search(tiny, capsys, monkeypatch):
    from collections import defaultdict

    from ctxnmt.decoding import translator as translator_module
    from ctxnmt.decoding.translator import Translator

    code, err, _ = translate(tiny, capsys, "--cuda-graphs")
    assert code == 2 and err.strip() == "ctxnmt translate: error: --cuda-graphs needs --device cuda (got 'cpu')"
    wrapped = []
    monkeypatch.setattr(translator_module, "graphed", lambda model: wrapped.append(model) or model)
    monkeypatch.setattr(translator_module, "search_batches", lambda *args, **kw: defaultdict(list))
    translator = Translator.load(tiny / "m")
    translator.translate(["el gato 3 ."])
    assert wrapped == []  # the model directory's config leaves graphs off
    translator.device = "cuda"  # the search is stubbed: nothing reaches a device
    translator.use_cuda_graphs()
    translator.translate(["el gato 3 ."])
    assert wrapped == [translator.model]


@pytest.mark.parametrize("flags, message", [
    (["--bf16"], "--bf16 needs --device cuda (got 'cpu')"),
    (["--precision", "bf16"], "--precision bf16 needs --device cuda (got 'cpu')"),
    (["--bf16", "--precision", "fp32"], "--bf16 and --precision fp32 contradict each other; use one"),
])
def test_a_bf16_search_is_refused_on_the_cpu_from_the_command_line(tiny, capsys, flags, message):
    code, err, _ = translate(tiny, capsys, *flags)
    assert code == 2 and err.strip() == f"ctxnmt translate: error: {message}"


def test_an_unknown_precision_flag_is_refused_by_name(tiny, capsys):
    with pytest.raises(SystemExit) as exit_:
        translate(tiny, capsys, "--precision", "fp16")
    assert exit_.value.code == 2 and "argument --precision: invalid choice: 'fp16'" in capsys.readouterr().err


def test_decoding_precision_bf16_searches_under_cuda_bf16_autocast(tiny, monkeypatch):
    """decoding.precision is applied in search_ids, so translate, validation and the server
    search alike: under CUDA bf16 autocast on CUDA, in float32 (with a warning) elsewhere."""
    from collections import defaultdict
    from contextlib import contextmanager

    from ctxnmt.decoding import translator as translator_module
    from ctxnmt.decoding.translator import Translator, search_ids

    casts, searched_under = [], []

    @contextmanager
    def autocast(device_type, dtype=None, **kw):  # a CPU build cannot enter CUDA autocast: record it
        casts.append((device_type, dtype))
        yield
        casts.pop()

    monkeypatch.setattr(torch, "autocast", autocast)
    monkeypatch.setattr(translator_module, "search_batches",
                        lambda *args, **kw: searched_under.append(list(casts)) or defaultdict(list))
    translator = Translator.load(tiny / "m")
    warnings = []
    translator.warn = warnings.append
    translator.translate(["el gato 3 ."])
    translator.use_precision("fp32")
    translator.translate(["el gato 3 ."])
    assert searched_under == [[], []] and warnings == []
    bf16 = dataclasses.replace(translator.config.decoding, precision="bf16")
    search_ids(translator.model, [[4, 5]], bf16, 2, device="cpu")  # e.g. validation on a CPU
    search_ids(translator.model, [[4, 5]], bf16, 2, device="cuda")  # the search is stubbed: nothing reaches a device
    assert searched_under[2:] == [[], [("cuda", torch.bfloat16)]]
    translator.config.decoding = bf16  # a model directory trained on a GPU, translated on the CPU
    translator.translate(["el gato 3 ."])
    translator.translate(["el gato 3 ."])
    assert searched_under[4:] == [[], []]
    assert warnings == ["decoding.precision bf16 applies on CUDA only; searching in float32 on cpu"]
    translator.device = "cuda"
    translator.use_precision("bf16")
    translator.translate(["el gato 3 ."])
    assert searched_under[6:] == [[("cuda", torch.bfloat16)]]
    with pytest.raises(ConfigError, match=r"^decoding.precision must be one of fp32, bf16, int8, not 'fp8'$"):
        translator.use_precision("fp8")


def test_an_int8_search_runs_its_products_in_int8_and_is_refused_off_the_cpu(tiny, capsys, monkeypatch):
    """--precision int8 (decoding.precision int8): search_ids runs inside int8.int8_products
    on the CPU; off the CPU it is refused in one line, never run in float32 in silence."""
    from ctxnmt.decoding.translator import Translator, search_ids
    from ctxnmt.models import int8

    calls = []
    linear = int8.linear
    monkeypatch.setattr(int8, "linear", lambda *args: calls.append(1) or linear(*args))
    code, err, rows = translate(tiny, capsys, "--precision", "int8")
    assert code == 0 and len(rows) == 2 and calls
    code, err, fp32 = translate(tiny, capsys)
    assert code == 0 and [r["src"] for r in fp32] == [r["src"] for r in rows]
    translator = Translator.load(tiny / "m")
    translator.device = "cuda"  # nothing reaches a device: the refusal comes first
    with pytest.raises(ConfigError, match=r"^--precision int8 runs on the CPU only \(got --device cuda\)$"):
        translator.use_precision("int8")
    int8_config = dataclasses.replace(translator.config.decoding, precision="int8")
    with pytest.raises(ConfigError, match=r"^decoding.precision int8 runs on the CPU only \(got device 'cuda'\)$"):
        search_ids(translator.model, [[4, 5]], int8_config, 2, device="cuda")
