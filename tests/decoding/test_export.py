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
from ctxnmt.tasks.translation import TranslationTask
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
    from ctxnmt.utils.checkpoint import checkpoint_record  # the server's model list reads the header alone
    assert checkpoint_record(weights)["progress"] == saved["progress"] and "model" not in checkpoint_record(weights)
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


def test_average_then_export_then_translate_from_the_command_line(tiny_corpus, tmp_path, capsys):
    """ctxnmt average, export and translate: the exported average translates as its model
    directory does with --checkpoint naming the averaged file."""
    from ctxnmt.cli import main

    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "model")
    sets = ["training.max_epochs=0", "training.max_updates=8", "training.valid_every=4", "training.keep_checkpoints=2"]
    assert main(["train", str(cfg), "--quiet", *[a for s in sets for a in ("--set", s)]]) == 0
    assert main(["average", str(tmp_path / "model"), "--last", "2", "-o", str(tmp_path / "avg.pt")]) == 0
    assert "averaged 2 checkpoints (update-4.pt, update-8.pt)" in capsys.readouterr().out
    assert main(["export", str(tmp_path / "model"), str(tmp_path / "out"), "--checkpoint", str(tmp_path / "avg.pt")]) == 0
    (tmp_path / "in.es").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    outputs = {}
    for name, args in (("dir", [str(tmp_path / "model"), "--checkpoint", str(tmp_path / "avg.pt")]),
                       ("exported", [str(tmp_path / "out")])):
        assert main(["translate", *args, "-i", str(tmp_path / "in.es"), "-o", str(tmp_path / f"{name}.en")]) == 0
        outputs[name] = (tmp_path / f"{name}.en").read_bytes()
    assert outputs["dir"] == outputs["exported"] and outputs["dir"].count(b"\n") == len(LINES)
    assert main(["average", str(tmp_path / "model"), "--last", "3", "-o", str(tmp_path / "three.pt")]) == 2
    assert "2 kept checkpoint(s)" in capsys.readouterr().err and not (tmp_path / "three.pt").exists()
