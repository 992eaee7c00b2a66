"""`ctxnmt export`: a model directory's translation part, weights as safetensors, translating
exactly as the directory it came from."""
from __future__ import annotations

import pytest

from ctxnmt.config import load_config
from ctxnmt.decoding.export import export_model
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import CheckpointError, DataError
from ctxnmt.models.migrations import load_model_checkpoint
from ctxnmt.training.trainer import Trainer
from ctxnmt.training.translation import TranslationTask
from tests.training.conftest import tiny_config, tiny_corpus  # noqa: F401 (a fixture)

LINES = ["el gato come .", "la casa grande .", "", "el sol va al cielo azul ."]


@pytest.fixture(scope="module")
def trained(tiny_corpus, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    cfg = tiny_config(tmp / "tiny.yaml", tiny_corpus, tmp / "model")
    config = load_config(cfg, ["training.max_epochs=0", "training.max_updates=30", "training.valid_every=30",
                               "training.lr=0.01", "decoding.max_len_rule=data"])
    Trainer(TranslationTask(config), quiet=True).train()
    return tmp / "model"


def test_an_exported_model_translates_as_its_model_directory(trained, tmp_path):
    out = tmp_path / "handed-on"
    weights = export_model(trained, out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "config.yaml", "model.safetensors", "prep/lengths.json", "prep/preprocess/preprocess.bpe.joint",
        "prep/preprocess/preprocess.json", "prep/preprocess/preprocess.truecase.src",
        "prep/preprocess/preprocess.truecase.tgt", "prep/vocab.src", "prep/vocab.tgt"]
    # safetensors: an 8-byte little-endian header length, then the JSON header; no pickle
    data = weights.read_bytes()
    assert data[8:9] == b"{" and b"ctxnmt" in data[8:8 + int.from_bytes(data[:8], "little")]
    original, exported = Translator.load(trained), Translator.load(out)
    assert [t.text for t in exported.translate(LINES, beam=3)] == [t.text for t in original.translate(LINES, beam=3)]
    assert [t.score for t in exported.translate(LINES, beam=3)] == [t.score for t in original.translate(LINES, beam=3)]
    saved = load_model_checkpoint(weights)
    assert "optimizer" not in saved and saved["src_vocab"] == load_model_checkpoint(
        trained / "checkpoints" / "best.pt")["src_vocab"]


def test_export_refuses_what_it_cannot_do_and_leaves_nothing(trained, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match=r"taken: exists and is not an empty directory"):
        export_model(trained, taken)
    with pytest.raises(CheckpointError, match=r"not a model directory \(no config.yaml\)"):
        export_model(tmp_path, tmp_path / "out")
    with pytest.raises(CheckpointError, match=r"checkpoint not found: .*nope\.pt"):
        export_model(trained, tmp_path / "out", checkpoint=tmp_path / "nope.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_a_damaged_weights_file_is_refused_in_one_line(trained, tmp_path):
    out = tmp_path / "handed-on"
    weights = export_model(trained, out)
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: corrupt, truncated or not a ctxnmt weights file"):
        Translator.load(out)
