"""`ctxnmt analyze alignment`: AER and SAER on cases computed by hand, AER against
nltk's, the gold formats and their errors, the subword → word rule, grow-diag-final,
eflomal on a corpus whose alignment is known, and the command end to end."""
from __future__ import annotations

import json
import random

import pytest
import torch

from ctxnmt.analysis.aer import GoldAlignment, aer, argmax_links, read_naacl, read_pharaoh, saer
from ctxnmt.analysis.alignment import word_matrix
from ctxnmt.analysis.forced import source_attention, word_groups
from ctxnmt.analysis.silver import grow_diag_final, silver_alignment
from ctxnmt.errors import DataError
from tests.models.test_rnnsearch import SRC, TGT, small_model
from tests.test_cli import run, small_corpus, write_config


def gold(sure, possible=()):
    g = GoldAlignment()
    for link in sure:
        g.add(link, sure=True)
    for link in possible:
        g.add(link, sure=False)
    return g


def test_aer_by_hand():
    g = gold({(0, 0), (1, 1)}, {(1, 2)})
    # |A∩S| = 1, |A∩P| = 2 (P ⊇ S), |A| = 3, |S| = 2
    assert aer([{(0, 0), (1, 2), (2, 2)}], [g]) == pytest.approx(1 - 3 / 5)
    # summed over the corpus, not averaged per sentence: 1 − (3 + 2) / (5 + 2)
    assert aer([{(0, 0), (1, 2), (2, 2)}, {(0, 0)}], [g, gold({(0, 0)})]) == pytest.approx(2 / 7)
    assert aer([{(0, 0), (1, 1)}], [g]) == 0.0
    assert aer([{(5, 5)}], [g]) == 1.0


def test_saer_and_argmax_by_hand():
    m = [[0.7, 0.3, 0.0], [0.1, 0.6, 0.3], [0.0, 0.5, 0.5]]  # M[j][i]: target word j, source word i
    g = gold({(0, 0), (1, 1)}, {(1, 2)})
    # |M⊙S| = 0.7 + 0.6, |M⊙P| = 1.3 + M[2][1] = 1.8, |M| = 3, |S| = 2
    assert saer([m], [g]) == pytest.approx(1 - 3.1 / 5)
    assert argmax_links(m) == {(0, 0), (1, 1), (1, 2)}  # the tie in row 2 goes to the first source word
    one_hot = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    assert saer([one_hot], [g]) == pytest.approx(aer([argmax_links(one_hot)], [g]))  # hard M: SAER = AER


def test_aer_agrees_with_nltk():
    from nltk.translate import Alignment, alignment_error_rate

    rng = random.Random(4)
    for _ in range(200):
        cells = [(i, j) for i in range(5) for j in range(5)]
        sure = set(rng.sample(cells, rng.randint(1, 6)))
        possible = sure | set(rng.sample(cells, rng.randint(0, 6)))
        hyp = set(rng.sample(cells, rng.randint(1, 8)))
        ours = aer([hyp], [gold(sure, possible)])
        theirs = alignment_error_rate(Alignment(sure), Alignment(hyp), Alignment(possible))
        assert ours == pytest.approx(theirs, abs=1e-12)


def test_read_pharaoh_with_possible_links(tmp_path):
    path, extra = tmp_path / "gold.txt", tmp_path / "possible.txt"
    path.write_text("0-0 1?2 2-1\n\n3-3\n", encoding="utf-8")
    extra.write_text("0-1\n1-1\n\n", encoding="utf-8")
    g = read_pharaoh(str(path), str(extra))
    assert [x.sure for x in g] == [{(0, 0), (2, 1)}, set(), {(3, 3)}]
    assert [x.possible for x in g] == [{(0, 0), (1, 2), (2, 1), (0, 1)}, {(1, 1)}, {(3, 3)}]
    for text, message in (("0-0 1-x\n", "gold.txt:1: '1-x' is not a link"), ("0-0\n2:3\n", "gold.txt:2: '2:3'")):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(DataError, match=message):
            read_pharaoh(str(path))
    path.write_text("0-0\n", encoding="utf-8")
    with pytest.raises(DataError, match="possible.txt has 3 lines but .*gold.txt has 1"):
        read_pharaoh(str(path), str(extra))


def test_read_naacl(tmp_path):
    path = tmp_path / "gold.naacl"
    path.write_text("1 1 1 S\n1 2 3 P\n1 0 2\n2 1 1\n2 3 2 P 0.8\n\n", encoding="utf-8")
    g = read_naacl(str(path), 2)
    assert [x.sure for x in g] == [{(0, 0)}, {(0, 0)}]
    assert [x.possible for x in g] == [{(0, 0), (1, 2)}, {(0, 0), (2, 1)}]
    for text, message in (("1 a 2\n", ":1: sentence and positions must be integers"),
                          ("1 1 1\n3 1 1\n", ":2: sentence 3 is outside 1 … 2"),
                          ("1 1 1 X\n", ":1: the label must be S or P"),
                          ("1 2\n", ":1: expected 'sentence source target"),
                          ("1 1 1 S high\n", ":1: the confidence must be a number")):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(DataError, match=message):
            read_naacl(str(path), 2)


def test_word_matrix_sums_source_pieces_and_averages_target_pieces():
    # target "new@@ found land </s>", source "ter@@ ra x"
    alpha = torch.tensor([[0.5, 0.3, 0.2], [0.3, 0.1, 0.6], [0.2, 0.2, 0.6], [0.3, 0.3, 0.4]])
    m = word_matrix(alpha, word_groups(["ter@@", "ra", "x"]), word_groups(["new@@", "found", "land"]))
    # row 0: ((0.5 + 0.3) + (0.3 + 0.1)) / 2, (0.2 + 0.6) / 2; the EOS row is dropped
    assert m[0] == pytest.approx([0.6, 0.4]) and m[1] == pytest.approx([0.4, 0.6])


def test_forced_source_attention_matches_step_by_step_decoding():
    model = small_model()
    alphas = source_attention(model, SRC, TGT)
    with torch.no_grad():
        for src, tgt, alpha in zip(SRC, TGT, alphas):
            enc = model.encode(torch.tensor([src]), torch.ones(1, len(src)))
            state, prev = model.init_state(enc), None
            for t, token in enumerate(tgt):
                _, state, step_alpha = model.step(enc, state, prev)
                torch.testing.assert_close(alpha[t], step_alpha[0], atol=1e-6, rtol=0)
                prev = torch.tensor([token])
            torch.testing.assert_close(alpha.sum(-1), torch.ones(len(tgt)))


def test_grow_diag_final_by_hand():
    forward = {(0, 0), (1, 1), (2, 1), (3, 3)}
    reverse = {(0, 0), (1, 1), (1, 2), (0, 1)}
    # intersection (0,0) (1,1); grown: (2,1) (source 2 unaligned), (1,2) (target 2 unaligned), both next to (1,1);
    # (0,1) joins two aligned words: never; final: (3,3), not next to any link, source 3 unaligned
    assert grow_diag_final(forward, reverse) == {(0, 0), (1, 1), (2, 1), (1, 2), (3, 3)}
    assert grow_diag_final(forward, forward) == forward
    assert grow_diag_final(set(), {(0, 2)}) == {(0, 2)}


def test_eflomal_silver_alignment_recovers_a_known_alignment():
    """Word a_k translates as b_k and the target reverses the word order: link (i, n−1−i)."""
    rng = random.Random(0)

    def pair():
        words = rng.sample(range(30), rng.randint(3, 7))
        return [f"a{k}" for k in words], [f"b{k}" for k in reversed(words)]

    train = [pair() for _ in range(400)]
    test = [pair() for _ in range(20)]
    links = silver_alignment([s for s, _ in train], [t for _, t in train], [s for s, _ in test],
                             [t for _, t in test], samplers=1)
    truth = [gold({(i, len(s) - 1 - i) for i in range(len(s))}) for s, _ in test]
    assert aer(links, truth) < 0.05


def train_tiny(tmp_path, capsys):
    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    assert run(["train", cfg, "--quiet", "--set", "training.max_updates=3", "--set", "training.valid_bleu=false"],
               capsys)[0] == 0
    return data


def test_alignment_command_end_to_end(tmp_path, capsys):
    data = train_tiny(tmp_path, capsys)
    src, ref = tmp_path / "in.es", tmp_path / "in.en"
    src.write_text("el gato 3 .\n\nel gato 11 .\n", encoding="utf-8")
    ref.write_text("sat cat 3 .\n\nthe cat 11 .\n", encoding="utf-8")
    model = tmp_path / "m"
    links, silver, out = tmp_path / "links.txt", tmp_path / "silver.txt", tmp_path / "silver.json"
    code, stdout, _ = run(["analyze", "alignment", model, "-i", src, "-r", ref, "--silver", "--silver-train",
                           data / "train.es", data / "train.en", "--write-silver", silver, "--write-links", links,
                           "-o", out], capsys)
    assert code == 0 and "SILVER (eflomal + grow-diag-final" in stdout
    result = json.loads(out.read_text())
    assert result["alignment"] == "silver" and "SILVER" in result["alignment_label"] and result["sentences"] == 2
    assert silver.read_text().splitlines()[1] == "" and len(silver.read_text().splitlines()) == 3
    assert all(0 <= int(x) < 4 for line in silver.read_text().split() for x in line.split("-"))
    # the same silver file as gold gives the same scores; the model's own links as gold give AER 0
    code, stdout, _ = run(["analyze", "alignment", model, "-i", src, "-r", ref, "--gold", silver, "-o", out], capsys)
    assert code == 0 and f"against: the links in {silver}" in stdout
    again = json.loads(out.read_text())
    assert (again["aer"], again["saer"]) == pytest.approx((result["aer"], result["saer"]))
    code, stdout, _ = run(["analyze", "alignment", model, "-i", src, "-r", ref, "--gold", links, "-o", out], capsys)
    own = json.loads(out.read_text())
    assert own["aer"] == 0.0 and own["hypothesis_links"] == own["sure_links"] == 8
    assert 0.0 < own["saer"] < 1.0  # attention is spread: soft links miss some mass
    # NAACL gold, 1-based, equal to the Pharaoh file
    naacl = tmp_path / "links.naacl"
    naacl.write_text("".join(f"{n} {int(i) + 1} {int(j) + 1} S\n" for n, line in
                             enumerate(links.read_text().splitlines(), 1) for i, j in
                             (x.split("-") for x in line.split())), encoding="utf-8")
    assert run(["analyze", "alignment", model, "-i", src, "-r", ref, "--gold", naacl, "--gold-format", "naacl",
                "-o", out], capsys)[0] == 0
    assert json.loads(out.read_text())["aer"] == 0.0


def test_alignment_command_errors(tmp_path, capsys):
    train_tiny(tmp_path, capsys)
    model = tmp_path / "m"
    src, ref, g = tmp_path / "in.es", tmp_path / "in.en", tmp_path / "gold.txt"
    src.write_text("el gato 3 .\nel gato 11 .\n", encoding="utf-8")
    ref.write_text("sat cat 3 .\nthe cat 11 .\n", encoding="utf-8")
    cases = [("0-0 1-1\n0-0 9-1\n", src, ref, [], "gold.txt: sentence 2: link 9-1 (0-based) is outside the sentence"),
             ("0-0\n0-0 x\n", src, ref, [], "gold.txt:2: 'x' is not a link"),
             ("0-0\n", src, ref, [], "gold.txt: 1 sentences but the input has 2 lines"),
             ("0-0\n0-0\n", src, ref, ["--possible", g], ""),  # a possible file is fine
             ("0-0\n0-0\n", src, ref, ["--gold-format", "naacl", "--possible", g], "--possible is for Pharaoh")]
    for text, s, r, extra, message in cases:
        g.write_text(text, encoding="utf-8")
        code, _, err = run(["analyze", "alignment", model, "-i", s, "-r", r, "--gold", g, *extra], capsys)
        if not message:
            assert code == 0, err
            continue
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    raw = tmp_path / "raw.es"
    raw.write_text("el gato 3.\nel gato 11 .\n", encoding="utf-8")  # Moses splits "3." into "3 ."
    g.write_text("0-0\n3-3\n", encoding="utf-8")
    code, _, err = run(["analyze", "alignment", model, "-i", raw, "-r", ref, "--gold", g], capsys)
    assert code == 2 and "raw.es:1: the model's tokenisation gives 4 words but the line has 3 tokens" in err
    # positions of the model's own words (a --write-silver file): raw text is fine, the bounds still hold
    assert run(["analyze", "alignment", model, "-i", raw, "-r", ref, "--gold", g, "--gold-words", "model"],
               capsys)[0] == 0
    g.write_text("0-0\n4-3\n", encoding="utf-8")
    code, _, err = run(["analyze", "alignment", model, "-i", raw, "-r", ref, "--gold", g, "--gold-words", "model"],
                       capsys)
    assert code == 2 and "sentence 2: link 4-3 (0-based) is outside the sentence (4 source words" in err
    short = tmp_path / "short.en"
    short.write_text("the cat\n", encoding="utf-8")
    code, _, err = run(["analyze", "alignment", model, "-i", src, "-r", short, "--gold", g], capsys)
    assert code == 2 and "short.en has 1 lines but" in err
