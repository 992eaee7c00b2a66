"""MODEL_DIR/prep is reused only while it matches the data section and the training and dev
files it was made from: an edited corpus is prepared again, and a resumed training, which
must read the data it was trained on, refuses prep that no longer matches and changes nothing."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ctxnmt.cli import main
from tests.training.conftest import tiny_config, write_corpus

TRAIN = ["--quiet", "--set", "training.max_epochs=0", "--set", "training.valid_every=100"]


def run(args, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(model_dir: Path) -> dict[str, bytes]:
    """Every file under the model directory, by relative path (train.log and TensorBoard aside)."""
    return {str(p.relative_to(model_dir)): p.read_bytes() for p in sorted(model_dir.rglob("*"))
            if p.is_file() and p.name != "train.log" and "tensorboard" not in p.parts}


@pytest.fixture
def trained(tmp_path, capsys):
    """(corpus, config, model_dir) of a training stopped after 3 updates, to be resumed."""
    corpus = write_corpus(tmp_path / "corpus")
    cfg = tiny_config(tmp_path / "c.yaml", corpus, tmp_path / "m")
    code, _, err = run(["train", cfg, *TRAIN, "--set", "training.max_updates=3"], capsys)
    assert code == 0, err
    return corpus, cfg, tmp_path / "m"


def target_words(model_dir: Path) -> str:
    return (model_dir / "prep" / "vocab.tgt").read_text(encoding="utf-8")


def test_prepare_after_an_edited_training_file_prepares_again(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    cfg = tiny_config(tmp_path / "c.yaml", corpus, tmp_path / "m")
    assert run(["prepare", cfg], capsys)[0] == 0
    assert "kitty" not in target_words(tmp_path / "m")
    (corpus / "train.en").write_text((corpus / "train.en").read_text().replace("cat", "kitty"), encoding="utf-8")
    code, _, err = run(["prepare", cfg], capsys)
    assert code == 0
    assert re.search(r"train\.en changed since \S+prep was prepared from it; preparing again", err)
    assert "kitty" in target_words(tmp_path / "m")  # before: the old vocabulary, silently


def test_a_corpus_written_again_byte_for_byte_is_the_same_corpus(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    cfg = tiny_config(tmp_path / "c.yaml", corpus, tmp_path / "m")
    assert run(["prepare", cfg], capsys)[0] == 0
    data = tmp_path / "m" / "prep" / "train" / "meta.json"
    made = data.stat().st_mtime_ns
    write_corpus(corpus)  # the same text, new modification times (a corpus built again)
    os.utime(corpus / "dev.es", ns=(1, 1))
    code, _, err = run(["prepare", cfg], capsys)
    assert code == 0 and "preparing again" not in err and data.stat().st_mtime_ns == made


def test_a_document_file_that_appears_is_a_change(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    (corpus / "dev.doc").unlink()
    cfg = tiny_config(tmp_path / "c.yaml", corpus, tmp_path / "m")
    assert run(["prepare", cfg], capsys)[0] == 0
    write_corpus(corpus)
    code, _, err = run(["prepare", cfg], capsys)
    assert code == 0 and re.search(r"dev\.doc is new since \S+prep was prepared; preparing again", err)


def test_prep_from_before_the_files_were_recorded_is_reused(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    cfg = tiny_config(tmp_path / "c.yaml", corpus, tmp_path / "m")
    assert run(["prepare", cfg], capsys)[0] == 0
    stamp = tmp_path / "m" / "prep" / "fingerprint.json"
    stamp.write_text(json.dumps({"data": json.loads(stamp.read_text())["data"]}), encoding="utf-8")
    (corpus / "train.en").write_text((corpus / "train.en").read_text().replace("cat", "kitty"), encoding="utf-8")
    code, _, err = run(["prepare", cfg], capsys)
    assert code == 0 and "preparing again" not in err and "kitty" not in target_words(tmp_path / "m")


def test_resume_after_the_training_file_changed_is_refused_and_changes_nothing(trained, capsys):
    corpus, cfg, model_dir = trained
    before = snapshot(model_dir)
    edited = (corpus / "train.en").read_text().replace("cat", "dog")  # the same size and vocabulary
    (corpus / "train.en").write_text(edited, encoding="utf-8")
    code, _, err = run(["train", cfg, *TRAIN, "--set", "training.max_updates=6", "--resume"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert re.search(r"train\.en changed since \S+prep was prepared from it; \S+ holds a training, which must go "
                     r"on with the data it was prepared from", err)  # before: it resumed on the old preparation
    assert snapshot(model_dir) == before


def test_resume_with_another_data_section_names_the_key_and_changes_nothing(trained, capsys):
    _, cfg, model_dir = trained
    before = snapshot(model_dir)
    code, _, err = run(["train", cfg, *TRAIN, "--set", "training.max_updates=6", "--set", "data.bpe_merges=20",
                        "--resume"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "prep was prepared with data.bpe_merges 40, not 20" in err
    assert snapshot(model_dir) == before  # before: prep was prepared again, then the checkpoint refused


def test_resume_on_unchanged_data_goes_on(trained, capsys):
    corpus, cfg, model_dir = trained
    write_corpus(corpus)  # rewritten, byte for byte
    code, out, err = run(["train", cfg, *TRAIN, "--set", "training.max_updates=6", "--resume"], capsys)
    assert code == 0, err
    assert "6 updates" in out and "preparing again" not in err


def test_prepare_in_a_directory_holding_a_training_keeps_its_data(trained, capsys):
    corpus, cfg, model_dir = trained
    before = snapshot(model_dir)
    code, _, err = run(["prepare", cfg, "--force"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "holds a training (done.json, checkpoints/last.pt)" in err and "--force would prepare it again" in err
    (corpus / "train.en").write_text((corpus / "train.en").read_text().replace("cat", "kitty"), encoding="utf-8")
    code, _, err = run(["prepare", cfg], capsys)
    assert code == 2 and re.search(r"train\.en changed since .* holds a training", err)
    assert snapshot(model_dir) == before  # before: --force, or the edit, prepared the training's data again


def test_a_missing_training_file_is_one_line(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    (corpus / "train.en").unlink()
    code, _, err = run(["prepare", tiny_config(tmp_path / "c.yaml", corpus, tmp_path / "m")], capsys)
    assert code == 2 and err.strip() == f"ctxnmt prepare: error: {corpus / 'train.en'}: no such file"


def test_a_data_parallel_fresh_start_over_a_training_is_refused_before_preparing(trained, capsys):
    corpus, cfg, model_dir = trained
    before = snapshot(model_dir)
    (corpus / "train.en").write_text((corpus / "train.en").read_text().replace("cat", "dog"), encoding="utf-8")
    code, _, err = run(["train", cfg, *TRAIN, "--nproc", "2"], capsys)
    assert code == 2 and "already holds a training (done.json, checkpoints/last.pt)" in err
    assert "preparing again" not in err and snapshot(model_dir) == before  # the launcher had prepared it again


def test_a_broken_stamp_is_prepared_again_but_not_under_a_training(trained, tmp_path, capsys):
    _, cfg, model_dir = trained
    stamp = model_dir / "prep" / "fingerprint.json"
    stamp.write_text("{broken", encoding="utf-8")
    before = snapshot(model_dir)
    code, _, err = run(["train", cfg, *TRAIN, "--set", "training.max_updates=6", "--resume"], capsys)
    assert code == 2 and "fingerprint.json" in err and "cannot tell what it was prepared from" in err
    assert snapshot(model_dir) == before
    corpus = write_corpus(tmp_path / "fresh")
    fresh = tiny_config(tmp_path / "f.yaml", corpus, tmp_path / "f")
    assert run(["prepare", fresh], capsys)[0] == 0
    (tmp_path / "f" / "prep" / "fingerprint.json").write_text("{broken", encoding="utf-8")
    code, _, err = run(["prepare", fresh], capsys)
    assert code == 0 and "cannot tell what it was prepared from; preparing again" in err


def test_a_data_key_added_since_at_its_default_keeps_prepared_data_valid(trained, capsys):
    """As if `data.test` were new: the stamp's section lacks it and its fingerprint differs."""
    _, cfg, model_dir = trained
    stamp = model_dir / "prep" / "fingerprint.json"
    recorded = json.loads(stamp.read_text())
    del recorded["section"]["test"]
    stamp.write_text(json.dumps({**recorded, "data": "0" * 16}), encoding="utf-8")
    code, out, err = run(["train", cfg, *TRAIN, "--set", "training.max_updates=6", "--resume"], capsys)
    assert code == 0 and "6 updates" in out and "preparing again" not in err
