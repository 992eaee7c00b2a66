"""The dev split is prepared in the training split's form (memory-mapped arrays, no pickle) and
holds exactly the ids that the earlier form, a torch pickle of lists, held; a model directory
prepared in that earlier form (prep/dev.pt) still trains, validates to the same scores and translates."""
from __future__ import annotations

import re
import shutil

import pytest
import torch

from ctxnmt.config import load_config
from ctxnmt.data.documents import document_runs
from ctxnmt.data.indexed import read_meta
from ctxnmt.data.prepare import prepare, read_split
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import DataError
from ctxnmt.models.nmt import build_model
from ctxnmt.training.trainer import Trainer
from ctxnmt.tasks.translation import TranslationTask, document_context, validate
from tests.training.conftest import tiny_config

QUIET = {"log": lambda line: None}


def encoded_as_before(prepared, config):
    """The dev split as the pickled form held it: every pair encoded, its text and document ids."""
    dev, pre = read_split(config.data, "dev"), prepared.preprocessor
    src = [prepared.src_vocab.encode(tokens, add_eos=False) for tokens in pre.encode_many(dev.src, "src")]
    tgt = [prepared.tgt_vocab.encode(tokens) for tokens in pre.encode_many(dev.tgt, "tgt")]
    return {"src": src, "tgt": tgt, "raw_src": dev.src, "raw_tgt": dev.tgt, "docs": dev.docs}


def test_the_dev_split_is_arrays_holding_the_ids_the_pickle_held(tiny_corpus, tmp_path):
    config = load_config(tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "model"))
    prepared = prepare(config, **QUIET)
    before = encoded_as_before(prepared, config)
    assert list(prepared.dev.src) == before["src"] and list(prepared.dev.tgt) == before["tgt"]
    assert prepared.references == before["raw_tgt"] and len(prepared.dev) == 12
    assert prepared.dev.docs.tolist() == document_runs(before["docs"])[0].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    prep = tmp_path / "model" / "prep"
    assert not list(prep.rglob("*.pt")) and read_meta(prep / "dev")["dtype"] == read_meta(prep / "train")["dtype"]


def test_a_directory_with_the_pickled_dev_split_trains_validates_alike_and_translates(tiny_corpus, tmp_path):
    config = load_config(tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "model"),
                         ["model.doc_aux=aux", "training.valid_bleu=true", "training.valid_max_sents=9",
                          "training.max_epochs=0", "training.max_updates=2", "training.valid_every=2"])
    new = prepare(config, **QUIET)
    torch.manual_seed(0)
    model = build_model(config.model, len(new.src_vocab), len(new.tgt_vocab))
    scores = validate(model, new, config, "cpu")
    prep = tmp_path / "model" / "prep"
    old_dev = encoded_as_before(new, config)
    shutil.rmtree(prep / "dev")
    torch.save(old_dev, prep / "dev.pt")  # as the earlier prepare wrote it

    old = prepare(config, **QUIET)  # still the data it was prepared from: read as it is, nothing written
    assert list(old.dev.src) == old_dev["src"] and old.references == old_dev["raw_tgt"]
    assert validate(model, old, config, "cpu") == scores
    assert Trainer(TranslationTask(config), quiet=True).train().update == 2
    assert (prep / "dev.pt").is_file() and not (prep / "dev").exists()
    dev = read_split(config.data, "dev")
    translated = [t.text for t in Translator.load(tmp_path / "model").translate(dev.src, doc_ids=dev.docs)]
    prepare(config, force=True, **QUIET)  # the same data in the arrays' form: the same translations
    assert not (prep / "dev.pt").exists() and (prep / "dev").is_dir()
    assert [t.text for t in Translator.load(tmp_path / "model").translate(dev.src, doc_ids=dev.docs)] == translated


def test_a_bad_dev_document_id_names_the_dev_file_and_its_line(tiny_corpus, tmp_path):
    shutil.copytree(tiny_corpus, tmp_path / "data")
    doc = tmp_path / "data" / "dev.doc"
    ids = doc.read_text(encoding="utf-8").splitlines()
    ids[6] = "doc0"  # line 7 goes back to the first document, after doc1's lines 5 and 6
    doc.write_text("\n".join(ids) + "\n", encoding="utf-8")
    config = load_config(tiny_config(tmp_path / "tiny.yaml", tmp_path / "data", tmp_path / "model"),
                         ["model.doc_aux=aux"])
    message = rf"^{re.escape(str(doc))}:7: document 'doc0' \(first at line 1\) continues after another document; "
    with pytest.raises(DataError, match=message + "a document's lines must be consecutive$"):
        document_context(prepare(config, **QUIET).dev, config, "dev")
