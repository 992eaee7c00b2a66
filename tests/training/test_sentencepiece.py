"""SentencePiece subwords end to end: a tiny corpus prepared with data.subwords: sentencepiece,
two updates of training for models of each kind (sentence-level, with the papers' adaptive
gates and a self-attentive target context, with document context), then `ctxnmt translate`
(with the length-ratio prior, which counts words from ▁), an ensemble and the server: every
output is detokenised text, no SentencePiece mark left in it."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from ctxnmt.cli import main
from ctxnmt.data.preprocess import WORD_START
from ctxnmt.data.words import word_groups
from ctxnmt.decoding.translator import Translator
from ctxnmt.serve.app import create_app
from ctxnmt.serve.settings import ServeSettings
from tests.training.conftest import tiny_config, write_corpus

with warnings.catch_warnings():  # as tests/serve/conftest.py: starlette asks for httpx2
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

SENTENCEPIECE = ["data.subwords=sentencepiece", "data.sentencepiece_vocab=80"]
KINDS = {
    "sentence": [],
    "adaptive": ["model.cell=adaptive-gru", "model.output=adaptive", "model.target_context=self-attentive"],
    "document": ["model.doc_init_dec=true", "model.doc_aux=gated-aux"],
}


def run(args) -> int:
    return main([str(a) for a in args])


def sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("sentencepiece")
    data = write_corpus(tmp / "data", n_train=121, n_dev=6)
    dirs = {}
    for kind, overrides in KINDS.items():
        cfg = tiny_config(tmp / f"{kind}.yaml", data, tmp / kind)
        assert run(["train", cfg, "--quiet", *sets(SENTENCEPIECE + overrides + ["training.max_updates=2"])]) == 0
        dirs[kind] = tmp / kind
    return dirs


def source(tmp_path: Path) -> Path:
    path = tmp_path / "in.es"
    path.write_text("El gato bebe agua.\nLa luna ve el sol rojo.\n\n", encoding="utf-8")
    return path


def translated(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


# the strongest length-ratio prior: an empty output (which two updates of training favour)
# costs the most, so every line gets words, counted from ▁
PRIOR = {"length_ratio_penalty": 100.0, "length_ratio_rule": "data"}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_of_model_translates_into_text(trained, kind, tmp_path):
    prep = trained[kind] / "prep"
    assert json.loads((prep / "preprocess" / "preprocess.json").read_text())["options"]["subwords"] == "sentencepiece"
    assert (prep / "preprocess" / "preprocess.sentencepiece.joint").is_file()
    assert not list((prep / "preprocess").glob("preprocess.bpe.*"))
    # each target is its source's words reversed and translated one for one: as many words
    assert json.loads((prep / "lengths.json").read_text())["words 0.5"] == 1.0
    out = tmp_path / "out.en"
    assert run(["translate", trained[kind], "-i", source(tmp_path), "-o", out, "--beam", "2",
                "--length-ratio-penalty", "100", "--length-ratio-rule", "data"]) == 0
    lines = translated(out)
    assert len(lines) == 3 and all(lines[:2]) and lines[2] == ""  # an empty line stays empty
    assert not any(WORD_START in line for line in lines)
    translator = Translator.load(str(trained[kind]))
    results = translator.translate(source(tmp_path).read_text().splitlines()[:2], beam=2, length=PRIOR)
    assert [r.text for r in results] == lines[:2]
    for result in results:  # the words beam search counted are those decoding joined
        words = "".join(result.tokens).replace(WORD_START, " ").split()
        assert result.tokens and len(word_groups(result.tokens, "sentencepiece")) == len(words)


def test_an_ensemble_of_copies_translates_as_its_model(trained, tmp_path):
    one, two = tmp_path / "one.en", tmp_path / "two.en"
    model = trained["sentence"]
    prior = ["--length-ratio-penalty", "100", "--length-ratio-rule", "data"]
    assert run(["translate", model, "-i", source(tmp_path), "-o", one, "--beam", "2", *prior]) == 0
    assert run(["translate", model, model, "-i", source(tmp_path), "-o", two, "--beam", "2", *prior]) == 0
    assert translated(one) == translated(two) and all(translated(two)[:2])
    assert not any(WORD_START in line for line in translated(two))


def test_the_server_answers_with_text_and_its_pieces(trained):
    translator = Translator.load(str(trained["adaptive"]))
    app = create_app(translator, [str(trained["adaptive"])], ServeSettings(beam=2))
    with TestClient(app) as client:
        answer = client.post("/v1/translate", json={"text": "El gato bebe agua.", "attention": True, **PRIOR})
    assert answer.status_code == 200
    sentence = answer.json()["sentences"][0]
    assert sentence["translation"] == translator.translate(["El gato bebe agua."], beam=2, length=PRIOR)[0].text
    assert sentence["translation"] and WORD_START not in sentence["translation"]
    assert sentence["src_tokens"][0].startswith(WORD_START)  # the pieces themselves keep their marks
