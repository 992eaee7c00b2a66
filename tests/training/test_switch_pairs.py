"""The architecture switches compose: every pair of six of them builds, trains a few
updates and beam-decodes on the tiny corpus (with document ids where a document model
reads them), with finite scores and one output per input line."""
from __future__ import annotations

import itertools
import math
import shutil

import pytest

from ctxnmt.config import load_config
from ctxnmt.decoding.translator import Translator
from ctxnmt.training.trainer import Trainer
from ctxnmt.tasks.translation import TranslationTask
from tests.training.conftest import tiny_config

SWITCHES = {
    "bcae": ["model.encoder=bcae"],
    "self-attentive-residual": ["model.target_context=self-attentive"],
    "adaptive-gru": ["model.cell=adaptive-gru"],
    "adaptive-output": ["model.output=adaptive"],
    "gated-aux": ["model.doc_aux=gated-aux"],  # configs/doc-gated-aux-small.yaml's switch
    "memory-rnn": ["model.decoder=memory-rnn"],
}
PAIRS = list(itertools.combinations(SWITCHES, 2))
LINES = ["el gato come .", "", "el perro bebe agua .", "la luna ve el sol rojo ."]
DOCS = ["d1", "d1", "d1", "d2"]


@pytest.fixture(scope="module")
def prepared(tiny_corpus, tmp_path_factory):
    """The tiny corpus prepared once: every pair's model directory starts with this prep/."""
    from ctxnmt.data.prepare import prepare

    tmp = tmp_path_factory.mktemp("pairs")
    cfg = tiny_config(tmp / "tiny.yaml", tiny_corpus, tmp / "prepared")
    prepare(load_config(cfg), log=lambda message: None)
    return cfg, tmp / "prepared" / "prep"


@pytest.mark.parametrize("pair", PAIRS, ids=["+".join(p) for p in PAIRS])
def test_every_pair_of_switches_trains_and_beam_decodes(pair, prepared, tmp_path):
    cfg, prep = prepared
    model_dir = tmp_path / "model"
    shutil.copytree(prep, model_dir / "prep")
    overrides = [f"model_dir={model_dir}", "training.max_epochs=0", "training.max_updates=2",
                 "training.valid_every=2", *SWITCHES[pair[0]], *SWITCHES[pair[1]]]
    progress = Trainer(TranslationTask(load_config(cfg, overrides)), quiet=True).train()
    assert progress.update == 2 and math.isfinite(progress.best_metric)
    translator = Translator.load(model_dir)
    translator.warn = pytest.fail  # a document model gets its ids; a sentence model is given none
    doc_ids = DOCS if translator.document_sents else None
    out = translator.translate(LINES, beam=2, nbest=2, doc_ids=doc_ids)
    assert len(out) == len(LINES) and out[1].text == "" and out[1].nbest == []
    for line, translation in zip(LINES, out):
        if line:
            assert len(translation.nbest) == 2 and all(math.isfinite(h.score) for h in translation.nbest)
