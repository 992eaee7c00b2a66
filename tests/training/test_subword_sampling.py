"""Subword regularisation in training (data.bpe_dropout, ctxnmt.data.sampling): each epoch of a run
trains on another segmentation of the same pairs, dev and the translation of test stay what they
are without it, and a run resumed in a later epoch equals the uninterrupted one."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import torch

from ctxnmt.config import load_config
from ctxnmt.data.prepare import load_prepared, prepare
from ctxnmt.decoding.translator import Translator
from ctxnmt.training.trainer import Trainer
from ctxnmt.tasks.translation import TranslationTask
from tests.training.conftest import tiny_config

DROPOUT = ["data.bpe_dropout=0.1", "data.subword_samples=2"]
# 121 pairs in batches of 8: 16 updates an epoch
TWO_EPOCHS = ["training.max_epochs=2", "training.valid_every=100"]


def seen_per_epoch(task: TranslationTask) -> dict[int, dict[int, tuple[list[int], list[int]]]]:
    """What each epoch's updates read of each pair: {epoch: {row: (source ids, target ids)}},
    filled as the task trains."""
    seen: dict[int, dict] = defaultdict(dict)
    epoch_units, backward, at = task.epoch_units, task.backward, []

    def units(epoch, starting):
        at[:] = [epoch]
        return epoch_units(epoch, starting)

    def spy(index, update):
        for row in index:
            seen[at[0]][row] = (task.train.src[row], task.train.tgt[row])
        return backward(index, update)

    task.epoch_units, task.backward = units, spy
    return seen


def words(vocab, ids: list[int]) -> str:
    return " ".join(vocab.decode(ids)).replace("@@ ", "")


def test_two_epochs_see_different_segmentations_of_each_pair_and_dev_and_test_do_not_change(
        tiny_corpus, tmp_path, one_thread):
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "sampled")
    task = TranslationTask(load_config(cfg, [*DROPOUT, *TWO_EPOCHS]))
    seen = seen_per_epoch(task)
    Trainer(task, quiet=True).train()
    assert sorted(seen) == [0, 1] and len(seen[0]) == len(seen[1]) == 121
    vocab = task.data.src_vocab
    changed = [row for row in range(121) if seen[0][row][0] != seen[1][row][0]]
    assert len(changed) > 10  # p = 0.1 of each merge: many of the pairs, not all
    for row in range(121):  # the same pair, its words whole
        assert words(vocab, seen[0][row][0]) == words(vocab, seen[1][row][0]) == words(vocab, task.data.train.src[row])
        assert words(vocab, seen[0][row][1]) == words(vocab, seen[1][row][1])
    assert any(seen[e][row][0] != list(task.data.train.src[row]) for e in (0, 1) for row in range(121))

    # dev and test: the deterministic segmentation, what the same data section without dropout gives
    plain = prepare(load_config(cfg, [f"model_dir={tmp_path / 'plain'}"]), log=lambda line: None)
    sampled = load_prepared(tmp_path / "sampled" / "prep")
    for name in ("preprocess.json", "preprocess.bpe.joint", "preprocess.truecase.src", "preprocess.truecase.tgt"):
        assert (tmp_path / "sampled/prep/preprocess" / name).read_bytes() == \
            (tmp_path / "plain/prep/preprocess" / name).read_bytes(), name
    for side in ("src", "tgt"):
        vocabs = (getattr(sampled, f"{side}_vocab"), getattr(plain, f"{side}_vocab"))
        assert [vocabs[0].decode(s) for s in getattr(sampled.dev, side)] == \
            [vocabs[1].decode(s) for s in getattr(plain.dev, side)]
    test_lines = (tiny_corpus / "dev.es").read_text(encoding="utf-8").splitlines()  # no test split: dev's lines
    translator = Translator.load(tmp_path / "sampled")
    first = [translator.preprocessor.encode(line, "src") for line in test_lines]
    assert first == [translator.preprocessor.encode(line, "src") for line in test_lines] == \
        [plain.preprocessor.encode(line, "src") for line in test_lines]
    assert [t.text for t in translator.translate(test_lines[:4])] == \
        [t.text for t in translator.translate(test_lines[:4])]


def test_a_run_resumed_in_its_second_epoch_equals_the_uninterrupted_one(tiny_corpus, tmp_path, one_thread):
    """Stopped at update 19 (the second epoch's third update, sample 2 of 2) and resumed to 24."""
    settings = [*DROPOUT, "training.max_epochs=0", "training.valid_every=100", "training.log_every=4"]
    straight = tiny_config(tmp_path / "a.yaml", tiny_corpus, tmp_path / "straight")
    Trainer(TranslationTask(load_config(straight, [*settings, "training.max_updates=24"])), quiet=True).train()
    cfg = tiny_config(tmp_path / "b.yaml", tiny_corpus, tmp_path / "resumed")
    Trainer(TranslationTask(load_config(cfg, [*settings, "training.max_updates=19"])), quiet=True).train()
    Trainer(TranslationTask(load_config(cfg, [*settings, "training.max_updates=24"])), resume=True, quiet=True).train()
    a, b = (torch.load(tmp_path / run / "checkpoints/last.pt", weights_only=True)["model"]
            for run in ("straight", "resumed"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    log = (tmp_path / "straight/train.log").read_text(encoding="utf-8")
    assert "epoch 1: 16 batches" in log and "sampled segmentation 1 of 2" in log
    assert "epoch 2: 16 batches" in log and "sampled segmentation 2 of 2" in log


@pytest.mark.parametrize("key", ["bpe_dropout", "sentencepiece_alpha"])
def test_without_sampling_training_reads_the_deterministic_split(key, tiny_corpus, tmp_path):
    overrides = [f"data.{key}=0", "data.subwords=sentencepiece", "data.sentencepiece_vocab=60"] \
        if key == "sentencepiece_alpha" else [f"data.{key}=0"]
    task = TranslationTask(load_config(tiny_config(tmp_path / "c.yaml", tiny_corpus, tmp_path / "m"), overrides))
    Trainer(task, quiet=True)  # sets the task up
    assert len(task.data.samples) == 0 and task.epoch_split(3)[0] is task.data.train
    assert not list(Path(tmp_path / "m" / "prep").glob("train-sample-*"))
