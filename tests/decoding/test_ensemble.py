"""Ensembles: one model or copies of one model decode exactly as that model; members
of different architectures combine as the average of their own (force-decoded)
log-probabilities; members with other vocabularies are refused by name."""
from __future__ import annotations

import math

import pytest
import torch

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.data.vocab import EOS
from ctxnmt.decoding.length import LengthControl
from ctxnmt.decoding.ensemble import Ensemble, pack, unpack
from ctxnmt.models.nmt import build_model
from tests.decoding.search import search_batch
from tests.decoding.test_beam import SRC, random_model, sequence_logprob


def other_model(seed=5):
    """A member of another architecture: self-attentive-RNN decoder, mean summary, other sizes."""
    torch.manual_seed(seed)
    cfg = ModelConfig.of(emb_dim=6, hidden_dim=9, att_dim=7, init="pytorch", decoder="self-attentive-rnn",
                      target_context="mean")
    model = build_model(cfg, 16, 16)
    with torch.no_grad():
        model.generator.bias[EOS] += 1.5
    return model.eval()


def search(model, **kw):
    return search_batch(model, *pad(SRC), beam=4, nbest=3, **kw)


def assert_same(a, b, tol):
    for hyps_a, hyps_b in zip(a, b):
        assert [h.tokens for h in hyps_a] == [h.tokens for h in hyps_b]
        for x, y in zip(hyps_a, hyps_b):
            assert abs(x.score - y.score) < tol and abs(x.logprob - y.logprob) < tol


def test_packing_keeps_members_apart_and_shared_entries_shared():
    from ctxnmt.models.state import State

    trees = [State().rows(s=torch.tensor([0.0, 1.0])).shared(U1=torch.ones(1)),
             State().rows(s=torch.tensor([2.0, 3.0]), sar_mem=torch.ones(2, 0))]
    packed = pack(trees)
    assert set(packed.parts) == {"0", "1"} and unpack(packed, 2) == trees
    moved = unpack(packed.select(torch.tensor([1, 1, 0])), 2)
    assert moved[0]["s"].tolist() == [1.0, 1.0, 0.0] and moved[1]["s"].tolist() == [3.0, 3.0, 2.0]
    assert moved[0]["U1"] is trees[0]["U1"] and moved[1]["sar_mem"].shape == (3, 0)


@pytest.mark.parametrize("mode", ["logprob", "prob"])
def test_an_ensemble_of_one_model_is_that_model(mode):
    model = random_model(0)
    assert_same(search(Ensemble([model], mode), return_attention=True), search(model), 1e-6)


@pytest.mark.parametrize("mode", ["logprob", "prob"])
def test_an_ensemble_of_two_copies_is_that_model(mode):
    model = random_model(1)
    assert_same(search(Ensemble([model, model], mode)), search(model), 1e-5)


def test_members_of_different_architectures_average_their_log_probabilities():
    a, b = random_model(2), other_model()
    ensemble = Ensemble([a, b], "logprob")
    gaps = []
    for sent, hyps in zip(SRC, search(ensemble, length=LengthControl(alpha=0.0))):
        assert len(hyps) >= 2
        for h in hyps:
            la, lb = sequence_logprob(a, sent, h.tokens), sequence_logprob(b, sent, h.tokens)
            assert abs(h.logprob - (la + lb) / 2) < 1e-4
            gaps.append(abs(la - lb))
    assert max(gaps) > 0.2  # the members disagree (by far more than the tolerance): a real check


def step_logprobs(model, src, tokens):
    src_t, mask = pad([src])
    with torch.no_grad():
        enc = model.encode(src_t, mask)
        state, prev, out = model.init_state(enc), None, []
        for tok in tokens + [EOS]:
            logp, state, _ = model.step(enc, state, prev)
            out.append(float(logp[0, tok]))
            prev = torch.tensor([tok])
    return out


def test_probability_mode_averages_probabilities_at_every_step():
    a, b = random_model(3), other_model(6)
    for sent, hyps in zip(SRC, search(Ensemble([a, b], "prob"), length=LengthControl(alpha=0.0))):
        for h in hyps:
            pa, pb = step_logprobs(a, sent, h.tokens), step_logprobs(b, sent, h.tokens)
            expected = sum(math.log((math.exp(x) + math.exp(y)) / 2) for x, y in zip(pa, pb))
            assert abs(h.logprob - expected) < 1e-4


def test_batched_ensemble_search_equals_one_sentence_at_a_time():
    ensemble = Ensemble([random_model(4), other_model(7)])
    batched = search(ensemble)
    for sent, hyps in zip(SRC, batched):
        alone = search_batch(ensemble, *pad([sent]), beam=4, nbest=3)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]


def test_bad_mode_and_members():
    with pytest.raises(ValueError, match="logprob, prob"):
        Ensemble([random_model()], "max")
    with pytest.raises(ValueError, match="output sizes differ"):
        Ensemble([random_model(), build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8), 16, 17)])


# -- through the command line and the Translator API ----------------------------------------

@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    from ctxnmt.cli import main
    from tests.test_cli import small_corpus, write_config

    tmp = tmp_path_factory.mktemp("ensemble")
    data = small_corpus(tmp)
    dirs = {}
    for name, overrides in (("baseline", []), ("mean", ["model.target_context=mean", "model.hidden_dim=32"]),
                            ("small-vocab", ["data.vocab_size=12"])):
        cfg = write_config(tmp / f"{name}.yaml", data, tmp / name)
        sets = [a for o in ["training.max_updates=2", "training.valid_bleu=false", *overrides] for a in ("--set", o)]
        assert main(["train", str(cfg), "--quiet", *sets]) == 0
        dirs[name] = tmp / name
    return dirs


def test_translate_with_an_ensemble(model_dirs, tmp_path, capsys):
    from ctxnmt.cli import main
    from ctxnmt.decoding.translator import Translator

    src = tmp_path / "in.es"
    src.write_text("el gato 3 .\n\nel gato 5 .\n")
    for mode in ("logprob", "prob"):
        out = tmp_path / f"out.{mode}"
        code = main(["translate", str(model_dirs["baseline"]), str(model_dirs["mean"]), "-i", str(src), "-o",
                     str(out), "--ensemble-mode", mode, "--beam", "2"])
        assert code == 0 and out.read_text().split("\n")[:-1][1] == "" and len(out.read_text().splitlines()) == 3
    lines = ["el gato 3 .", "el gato 7 ."]
    single = Translator.load(model_dirs["baseline"]).translate(lines, beam=3, nbest=3)
    of_one = Translator.load([model_dirs["baseline"]]).translate(lines, beam=3, nbest=3)
    for a, b in zip(single, of_one):
        assert [h.text for h in a.nbest] == [h.text for h in b.nbest]
        assert [h.score for h in a.nbest] == pytest.approx([h.score for h in b.nbest], abs=1e-6)


def test_members_with_another_vocabulary_are_refused_by_name(model_dirs, tmp_path, capsys):
    from ctxnmt.cli import main

    src = tmp_path / "in.es"
    src.write_text("el gato 3 .\n")
    a, c = model_dirs["baseline"], model_dirs["small-vocab"]
    code = main(["translate", str(a), str(c), "-i", str(src)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"cannot ensemble {a} and {c}" in err and "different target vocabulary" in err
    code = main(["translate", str(a), str(model_dirs["mean"]), "-i", str(src), "--checkpoint",
                 str(a / "checkpoints" / "last.pt")])
    assert code == 2 and "ensemble" in capsys.readouterr().err
