"""Sampled segmentations of the training pairs written at prepare (ctxnmt.data.sampling): the
deterministic split's rows, every sampled subword in the vocabulary, the same bytes for any number
of workers, nothing new where sampling is off, a changed probability prepared again, and bad
settings refused naming the key."""
from __future__ import annotations

import functools
import random
import re
from pathlib import Path

import numpy as np
import pytest

from ctxnmt.config import load_config
from ctxnmt.data import prepare as prepare_module
from ctxnmt.data import stream
from ctxnmt.data.prepare import prepare
from ctxnmt.data.sampling import sample_seed
from ctxnmt.data.vocab import UNK
from ctxnmt.errors import ConfigError
from tests.training.conftest import tiny_config, write_corpus

BPE_DROPOUT = ["data.bpe_dropout=0.1", "data.subword_samples=3"]
SP_ALPHA = ["data.subwords=sentencepiece", "data.sentencepiece_vocab=60", "data.sentencepiece_alpha=0.5",
            "data.subword_samples=3"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("sampling-corpus"))


def files(prep: Path) -> dict[Path, bytes]:
    return {p.relative_to(prep): p.read_bytes() for p in prep.rglob("*") if p.is_file()}


def prepared(corpus: Path, tmp_path: Path, name: str, overrides: list[str], workers: int = 1, log=None):
    cfg = tiny_config(tmp_path / f"{name}.yaml", corpus, tmp_path / name)
    return prepare(load_config(cfg, overrides), log=log or (lambda line: None), workers=workers)


def joined(vocab, ids) -> str:
    """A sentence's words, however it was segmented (BPE's @@ or SentencePiece's ▁)."""
    pieces = vocab.decode(ids)
    return " ".join(pieces).replace("@@ ", "") if not any("\u2581" in p for p in pieces) else \
        "".join(pieces).replace("\u2581", " ").strip()


@pytest.mark.parametrize("overrides", [BPE_DROPOUT, SP_ALPHA], ids=["bpe-dropout", "sentencepiece-alpha"])
def test_each_sample_holds_the_deterministic_split_s_pairs_segmented_another_way(overrides, corpus, tmp_path):
    data = prepared(corpus, tmp_path, "m", [*overrides, "data.max_len=30"])
    train, vocab = data.train, data.src_vocab
    assert 0 < len(train) < 121  # the length filter dropped some pairs
    assert len(data.samples) == 3 and all(len(s) == len(train) for s in data.samples)
    for sample in data.samples:
        assert sample.docs is train.docs  # the split's document numbers, not a copy
        for side in ("src", "tgt"):
            det, got = getattr(train, side), getattr(sample, side)
            assert [joined(vocab, s) for s in got] == [joined(vocab, s) for s in det]
            assert not np.any(np.asarray(got.ids) == UNK)  # every sampled subword is counted into the vocabulary
    differs = [sum(list(a) != list(b) for a, b in zip(sample.src, train.src)) for sample in data.samples]
    assert all(d > 10 for d in differs)  # many pairs segmented otherwise, in each sample
    assert list(data.samples[0].src) != list(data.samples[1].src)  # and each sample its own way
    assert max(data.samples[0].src.lens.max(), data.samples[0].tgt.lens.max() - 1) >= \
        max(train.src.lens.max(), train.tgt.lens.max() - 1)  # sampled pieces are shorter: as many or more
    first = data.samples[0]  # one sample mapped at a time (each holds its lengths in memory)
    assert data.samples[0] is first and data.samples[1] is not first and data.samples[0] is not first
    with pytest.raises(IndexError):
        data.samples[3]


def test_sampling_off_prepares_the_bytes_it_prepared_before(corpus, tmp_path):
    """bpe_dropout 0 with samples asked for is the default data section's preparation, file for
    file (only the stamp records the keys)."""
    default = prepared(corpus, tmp_path, "default", [])
    off = prepared(corpus, tmp_path, "off", ["data.bpe_dropout=0", "data.sentencepiece_alpha=0",
                                             "data.subword_samples=5"])
    a, b = files(tmp_path / "default" / "prep"), files(tmp_path / "off" / "prep")
    del a[Path("fingerprint.json")], b[Path("fingerprint.json")]
    assert a == b and Path("train/src.bin") in a
    assert len(default.samples) == len(off.samples) == 0
    assert not any(str(path).startswith("train-sample") for path in b)


@pytest.mark.parametrize("overrides", [BPE_DROPOUT, SP_ALPHA], ids=["bpe-dropout", "sentencepiece-alpha"])
def test_prepare_gives_the_same_samples_for_one_and_two_workers(overrides, corpus, tmp_path, monkeypatch):
    """Eight blocks of 16 lines, on one worker and on two (forked, each drawing its blocks' samples)."""
    monkeypatch.setattr(prepare_module, "prepare_training", functools.partial(stream.prepare_training, block_lines=16))
    monkeypatch.setattr(prepare_module, "SMALL_CORPUS_BYTES", 0)
    logged: list[str] = []
    for workers in (1, 2):
        prepared(corpus, tmp_path, f"w{workers}", overrides, workers, logged.append)
    assert "prepare: 121 training pairs read in 8 blocks on 2 worker(s)" in logged
    one, two = files(tmp_path / "w1" / "prep"), files(tmp_path / "w2" / "prep")
    assert Path("train-sample-2/src.bin") in one and one == two


def test_a_sample_is_drawn_from_its_block_and_number_alone(corpus, tmp_path, monkeypatch):
    """Blocks of 16 lines: the same samples whatever else the process drew before."""
    monkeypatch.setattr(prepare_module, "prepare_training", functools.partial(stream.prepare_training, block_lines=16))
    first = prepared(corpus, tmp_path, "a", BPE_DROPOUT)
    random.seed(99)
    state = random.getstate()
    second = prepared(corpus, tmp_path, "b", BPE_DROPOUT)
    assert random.getstate() == state  # the process's generator is given back as it was
    assert all(list(a.src) == list(b.src) for a, b in zip(first.samples, second.samples))
    seeds = {sample_seed(block, sample) for block in range(100) for sample in range(8)}
    assert len(seeds) == 800 and all(0 <= s < 2 ** 32 for s in seeds)


def test_a_changed_dropout_prepares_again_naming_the_key(corpus, tmp_path):
    logged: list[str] = []
    prepared(corpus, tmp_path, "m", BPE_DROPOUT, log=logged.append)
    before = (tmp_path / "m/prep/train-sample-0/src.bin").read_bytes()
    prepared(corpus, tmp_path, "m", ["data.bpe_dropout=0.3", "data.subword_samples=3"], log=logged.append)
    assert any("was prepared with data.bpe_dropout 0.1, not 0.3; preparing again" in line for line in logged)
    assert (tmp_path / "m/prep/train-sample-0/src.bin").read_bytes() != before
    data = prepared(corpus, tmp_path, "m", [], log=logged.append)  # off: the samples go with the old prep/
    assert len(data.samples) == 0 and not (tmp_path / "m/prep/train-sample-0").exists()


@pytest.mark.parametrize("overrides, message", [
    (["data.bpe_dropout=1"], r"data\.bpe_dropout must be in \[0, 1\), got 1\.0$"),
    (["data.bpe_dropout=-0.1"], r"data\.bpe_dropout must be in \[0, 1\)"),
    (["data.subwords=sentencepiece", "data.sentencepiece_alpha=-1"], r"data\.sentencepiece_alpha must be 0 or more"),
    (["data.bpe_dropout=0.1", "data.subword_samples=0"], r"data\.subword_samples must be at least 1, got 0$"),
    (["data.subwords=sentencepiece", "data.bpe_dropout=0.1"],
     r"data\.bpe_dropout is for subwords: bpe, not sentencepiece; SentencePiece samples with "
     r"data\.sentencepiece_alpha$"),
    (["data.sentencepiece_alpha=0.1"],
     r"data\.sentencepiece_alpha is for subwords: sentencepiece, not bpe; BPE samples with data\.bpe_dropout$"),
    (["data.bpe_merges=0", "data.bpe_dropout=0.1"], r"data\.bpe_dropout needs BPE merges to drop"),
    (["data.subwords=sentencepiece", "data.sentencepiece_type=bpe", "data.sentencepiece_alpha=1"],
     r"data\.sentencepiece_alpha must be in \[0, 1\) with sentencepiece_type bpe"),
], ids=["dropout-1", "dropout-negative", "alpha-negative", "no-samples", "dropout-sentencepiece", "alpha-bpe",
        "dropout-no-merges", "alpha-sentencepiece-bpe"])
def test_bad_sampling_settings_are_refused_naming_the_key(overrides, message, corpus, tmp_path):
    """The key at fault is the last one set: the error names it and where it was set."""
    with pytest.raises(ConfigError, match=rf"^--set {re.escape(overrides[-1])}: {message}") as refused:
        load_config(tiny_config(tmp_path / "c.yaml", corpus, tmp_path / "m"), overrides)
    assert refused.value.key == overrides[-1].split("=")[0]
