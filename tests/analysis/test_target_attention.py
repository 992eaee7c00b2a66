"""Target-side attention weights: consistent with the summaries that use them,
padding-independent under forced decoding, reduced to words correctly; and the
`analyze target-attention` / `analyze trees` commands end to end on a tiny model."""
from __future__ import annotations

import csv

import pytest
import torch

from ctxnmt.analysis.forced import target_attention, word_attention, word_groups
from ctxnmt.analysis.target_attention import max_positions, position_histogram
from ctxnmt.cli import main
from ctxnmt.errors import ConfigError
from tests.models.test_rnnsearch import SRC, TGT, small_model
from tests.test_cli import small_corpus, write_config

SCORED = ["self-attentive", "self-attentive-sum", "self-attentive-product", "self-attentive-dot",
          "self-attentive-scope"]


@pytest.mark.parametrize("name", SCORED)
def test_weights_are_the_causal_weights_of_full(name):
    summary = small_model(target_context=name).decoder.summary
    B, T = 2, 21  # longer than the content summary's blocks of 16
    torch.manual_seed(1)
    prev, states, contexts = torch.randn(B, T, 8), torch.randn(B, T, 10), torch.randn(B, T, 20)
    mask = torch.ones(B, T)
    with torch.no_grad():
        alpha = summary.weights(prev, mask, states, contexts)
        d = summary.full(prev, mask, states, contexts)
    assert alpha.shape == (B, T, T)
    assert float(alpha.triu(1).abs().max()) == 0.0  # nothing from later words
    torch.testing.assert_close(alpha.sum(-1), torch.ones(B, T))
    torch.testing.assert_close(torch.bmm(alpha, prev), d, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["previous", "mean"])
def test_summaries_without_attention_say_so(name):
    summary = small_model(target_context=name).decoder.summary
    with pytest.raises(ConfigError, match="no attention over previous words"):
        summary.weights(torch.zeros(1, 3, 8), torch.ones(1, 3))


@pytest.mark.parametrize("name", ["self-attentive", "self-attentive-scope"])
def test_forced_weights_of_a_sentence_alone_equal_those_in_a_padded_batch(name):
    model = small_model(target_context=name)
    batched = target_attention(model, SRC, TGT)
    for s, t, alpha in zip(SRC, TGT, batched):
        assert alpha.shape == (len(t), len(t))
        torch.testing.assert_close(target_attention(model, [s], [t])[0], alpha, atol=1e-6, rtol=0)


def test_word_attention_uses_first_subwords_and_sums_earlier_words():
    tokens = ["new@@", "found@@", "land", "is", "big"]
    groups = word_groups(tokens)
    assert groups == [[0, 1, 2], [3], [4]]
    alpha = torch.zeros(6, 6)
    alpha[3, :4] = torch.tensor([0.1, 0.2, 0.3, 0.4])  # predicting "is": y_0, new@@, found@@, land
    alpha[4, :5] = torch.tensor([0.0, 0.1, 0.1, 0.1, 0.7])  # predicting "big"
    A = word_attention(alpha, groups)
    assert A[0] == [] and A[1] == pytest.approx([0.9]) and A[2] == pytest.approx([0.3, 0.7])


def test_max_positions_and_histogram():
    alpha = torch.tensor([[1.0, 0, 0, 0], [0.2, 0.8, 0, 0], [0.6, 0.1, 0.3, 0], [0.1, 0.1, 0.1, 0.7]])
    r = max_positions(alpha, 3)  # the EOS row (the last) is left out; t = 1 has no choice
    assert r == [1.0, 0.0]
    assert position_histogram(r + [0.5, 0.49], 2) == [(0.0, 0.5, 2), (0.5, 1.0, 2)]


# -- end to end -----------------------------------------------------------------------------

def run(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiny")
    data = small_corpus(tmp)
    cfg = write_config(tmp / "c.yaml", data, tmp / "m")
    overrides = ["--set", "model.target_context=self-attentive", "--set", "training.max_updates=3",
                 "--set", "training.valid_bleu=false", "--set", "data.bpe_merges=20"]
    assert main(["train", str(cfg), "--quiet", *overrides]) == 0
    return tmp, data


def test_target_attention_command(tiny_model, tmp_path, capsys):
    tmp, data = tiny_model
    src = data / "dev.es"
    n_lines = len(src.read_text().splitlines())
    for extra in ([], ["-r", data / "dev.en"]):
        out = tmp_path / ("ref" if extra else "own")
        code, stdout, err = run(["analyze", "target-attention", tmp / "m", "-i", src, "-o", out, "--bins", "5",
                                 "--max-plots", "3", "--beam", "2", *extra], capsys)
        assert code == 0, err
        with open(out / "max_position.csv") as fh:
            rows = list(csv.DictReader(fh))
        assert len(rows) == 5 and rows[0]["bin_low"] == "0.0000" and rows[-1]["bin_high"] == "1.0000"
        counts = [int(r["count"]) for r in rows]
        assert f"{sum(counts)} steps" in stdout
        trees = (out / "trees.txt").read_text().splitlines()
        assert len(trees) == n_lines and (out / "max_position.png").stat().st_size > 0
    # (a model trained for seconds may stop at once on its own; forced to the references it cannot)
    assert sum(float(r["fraction"]) for r in rows) == pytest.approx(1.0, abs=1e-5)
    assert len(list(out.glob("sentence*.png"))) == 3
    assert all(t.startswith("(") for t in trees)
    # forced to the references, every target word of "w cat i ." (4 words + EOS) makes a step from t = 2 on
    words = [len(line.split()) for line in (data / "dev.en").read_text().splitlines()]
    assert sum(counts) >= sum(n - 1 for n in words)


def test_trees_command(tiny_model, tmp_path, capsys):
    tmp, data = tiny_model
    src = tmp_path / "src.es"
    src.write_text("el gato 1 .\nel gato 2 .\n")
    mrg = tmp_path / "ref.mrg"
    mrg.write_text("(S (NP (DT the) (NN cat)) (VP (CD 1)) (. .))\n(S (NP (DT a) (NN cat)) (VP (CD 2) (. .)))\n")
    out = tmp_path / "trees.txt"
    code, stdout, err = run(["analyze", "trees", tmp / "m", "-i", src, "--trees", mrg, "-o", out], capsys)
    assert code == 0, err
    induced = out.read_text().splitlines()
    assert len(induced) == 2 and induced[0].replace("(", "").replace(")", "").split() == ["the", "cat", "1", "."]
    assert "attention trees  precision" in stdout
    # right-branching: (1,4) (2,4) vs {(0,2)} and (1,4) (2,4) vs {(0,2), (2,4)}: 1 of 4 matched, 1 of 3 found
    assert "right-branching  precision 25.00  recall 33.33" in stdout


def test_bad_inputs_are_one_line_errors(tiny_model, tmp_path, capsys):
    tmp, data = tiny_model
    short = tmp_path / "short.en"
    short.write_text("the cat 1 .\n")
    code, _, err = run(["analyze", "target-attention", tmp / "m", "-i", data / "dev.es", "-r", short,
                        "-o", tmp_path / "o"], capsys)
    assert code == 2 and "has 1 lines but" in err and len(err.strip().splitlines()) == 1
    mrg = tmp_path / "bad.mrg"
    mrg.write_text("(S (NP (DT the) (NN cat))\n")
    code, _, err = run(["analyze", "trees", tmp / "m", "-i", short, "--trees", mrg], capsys)
    assert code == 2 and "unbalanced" in err
    for trees, message in ((tmp_path / "none.mrg", "none.mrg: no such file"),
                           (tmp_path / "latin1.mrg", "latin1.mrg:1: invalid UTF-8 (byte 0xe1 at column 10)")):
        if trees.name == "latin1.mrg":
            trees.write_bytes(b"(S (NN ca\xe1))\n")
        code, _, err = run(["analyze", "trees", tmp / "m", "-i", short, "--trees", trees], capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    # a model without target attention
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "mean")
    assert main(["train", str(cfg), "--quiet", "--set", "model.target_context=mean", "--set",
                 "training.max_updates=1", "--set", "training.valid_bleu=false"]) == 0
    code, _, err = run(["analyze", "target-attention", tmp_path / "mean", "-i", short, "-o", tmp_path / "o"], capsys)
    assert code == 2 and "'mean'" in err and "no attention over previous words" in err
