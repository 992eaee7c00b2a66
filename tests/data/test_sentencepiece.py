"""SentencePiece subwords (data.subwords: sentencepiece): decoding gives back the words that
encoding was given, words are counted from ▁ by the one definition BPE's go through too,
prepare writes the same files for any number of workers and blocks, and bad settings and
model files are one-line errors."""
from __future__ import annotations

import functools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ctxnmt.config import load_config
from ctxnmt.data import prepare as prepare_module
from ctxnmt.data import stream
from ctxnmt.data.indexed import Side, TokenArrays
from ctxnmt.data.prepare import length_ratios, prepare
from ctxnmt.data.preprocess import WORD_START, Preprocessor
from ctxnmt.data.vocab import Vocab
from ctxnmt.data.words import WordBoundaries, count_words, goes_on, join_word, joins_back, word_groups, word_starts
from ctxnmt.decoding.beam import _RowWords
from ctxnmt.errors import CheckpointError, ConfigError
from tests.data.conftest import learned_pipeline
from tests.training.conftest import write_corpus

SP = dict(src_lang="es", tgt_lang="en", subwords="sentencepiece", sentencepiece_vocab=60)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("sp-corpus"))


def lines(corpus: Path, name: str) -> list[str]:
    return (corpus / name).read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module", params=[(True, True), (False, False)], ids=["moses", "raw"])
def fitted(request, corpus, tmp_path_factory) -> Preprocessor:
    tokenize, truecase = request.param
    return learned_pipeline(tmp_path_factory.mktemp("fit"), lines(corpus, "train.es"), lines(corpus, "train.en"),
                            tokenize=tokenize, truecase=truecase, **SP)


# -- the pipeline ----------------------------------------------------------------------------------

def test_decoding_gives_back_the_line_that_was_encoded(fitted):
    # words of the corpus, a capital at the line start (truecased away and back) and a word
    # of characters the model never saw
    for line, side in (("El gato bebe agua.", "src"), ("The big cat drinks water.", "tgt"),
                       ("Жук sees the moon.", "tgt")):
        pieces = fitted.encode(line, side)
        assert pieces[0].startswith(WORD_START) and len(pieces) > len(line.split())  # 60 pieces split words
        assert fitted.decode(pieces, side) == line


def test_sentencepiece_runs_on_the_tokenised_truecased_words(corpus, tmp_path):
    pre = learned_pipeline(tmp_path, lines(corpus, "train.es"), lines(corpus, "train.en"), **SP)
    pieces = pre.encode("El gato, come.", "src")
    # the Moses words "el gato , come ." (the capital truecased away), each starting with ▁
    assert "".join(pieces).split(WORD_START)[1:] == ["el", "gato", ",", "come", "."]
    assert pre.decode(pieces, "src") == "El gato, come."


def test_the_model_is_stored_loaded_and_learned_per_side_where_asked(fitted, corpus, tmp_path):
    fitted.save(tmp_path / "joint")
    record = json.loads((tmp_path / "joint" / "preprocess.json").read_text())
    assert record["files"]["sentencepiece_joint"] == "preprocess.sentencepiece.joint"
    assert record["options"]["subwords"] == "sentencepiece" and record["options"]["sentencepiece_vocab"] == 60
    loaded = Preprocessor.load(tmp_path / "joint")
    line = "el perro ve la luna ."
    assert loaded.encode(line, "src") == fitted.encode(line, "src")
    per_side = learned_pipeline(tmp_path / "fit", lines(corpus, "train.es"), lines(corpus, "train.en"),
                                joint_bpe=False, **SP)
    per_side.save(tmp_path / "sides")
    names = {p.name for p in (tmp_path / "sides").iterdir()}
    assert {"preprocess.sentencepiece.src", "preprocess.sentencepiece.tgt"} <= names
    assert "preprocess.sentencepiece.joint" not in names


def test_a_missing_or_corrupt_model_file_is_a_one_line_error(fitted, tmp_path):
    fitted.save(tmp_path)
    model = tmp_path / "preprocess.sentencepiece.joint"
    model.write_bytes(b"not a model")
    with pytest.raises(CheckpointError, match=rf"^{model}: corrupt SentencePiece model \(not a serialised model\)$"):
        Preprocessor.load(tmp_path)
    model.unlink()
    with pytest.raises(CheckpointError, match=rf"^{model}: SentencePiece model missing$"):
        Preprocessor.load(tmp_path)


def test_a_vocabulary_below_the_corpus_characters_is_a_one_line_error(corpus, tmp_path):
    with pytest.raises(ConfigError, match=r"^preprocessing: SentencePiece cannot learn a model of sentencepiece_vocab "
                                          r"5 pieces here: Vocabulary size is smaller than required_chars[^\n]*$"):
        learned_pipeline(tmp_path, lines(corpus, "train.es"), lines(corpus, "train.en"),
                         **{**SP, "sentencepiece_vocab": 5})


@pytest.mark.parametrize("key, value, message", [
    ("subwords", "wordpiece", "data.subwords must be one of bpe, sentencepiece, not 'wordpiece'"),
    ("sentencepiece_type", "char", "data.sentencepiece_type must be one of unigram, bpe, not 'char'"),
    ("sentencepiece_vocab", "0", "data.sentencepiece_vocab must be at least 1, got 0"),
])
def test_bad_settings_are_one_line_errors_naming_the_key(tmp_path, key, value, message):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data: {corpus: files}\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg, [f"data.{key}={value}"])
    assert str(err.value) == f"--set data.{key}={value}: {message}"


# -- words ------------------------------------------------------------------------------------------

# ids 4…: ▁the new found land ▁ Жук ▁ends@@ ; with the specials first (ids 0-3)
VOCAB = Vocab(["▁the", "new", "found", "land", "▁", "Жук", "▁ends@@"])


def test_a_piece_starting_with_the_mark_starts_a_word():
    # the mark is on the next piece; a lone ▁ only marks where the next piece's word starts
    assert goes_on(VOCAB, "sentencepiece").tolist() == [False] * 8 + [True, False, False]
    # a special symbol has no ▁: it joins on, as decoding joins it
    assert joins_back(VOCAB, "sentencepiece").tolist() == [True] * 4 + [False, True, True, True, False, True, False]
    assert joins_back(VOCAB, "bpe") is None
    # the/new/found/land/▁/Жук/ends@@ = ids 4/5/6/7/8/9/10
    seqs = [[4, 5, 6, 7],  # ▁the new found land: one word, "thenewfoundland"
            [5, 4, 7],  # new ▁the land: a sentence's first piece starts a word without ▁: 2
            [8, 9, 4],  # ▁ Жук ▁the: "Жук the", 2
            [10, 10, 4],  # ▁ends@@ ▁ends@@ ▁the: "@@" means nothing here, 3
            [4, 1, 4],  # ▁the <unk> ▁the: 2
            [8, 4, 8, 8],  # ▁ ▁the ▁ ▁: "the", and a word begun at the end (cut short: it counts), 2
            []]
    seqs = Side.from_lists(seqs)
    found = count_words(seqs, goes_on(VOCAB, "sentencepiece"), joins_back=joins_back(VOCAB, "sentencepiece"))
    assert found.tolist() == [1, 2, 2, 3, 2, 2, 0]
    assert count_words(seqs, goes_on(VOCAB, "bpe")).tolist() == [4, 3, 3, 1, 3, 4, 0]  # BPE's reading: only @@


def test_word_starts_count_only_real_pieces_of_a_left_padded_history():
    # beam search's histories are left-padded: the pad before a piece without ▁ joins nothing
    ids = torch.tensor([[0, 0, 5, 6, 4], [0, 4, 5, 8, 9]])
    real = torch.tensor([[False, False, True, True, True], [False, True, True, True, True]])
    words = WordBoundaries.of(VOCAB, VOCAB, "sentencepiece")
    assert word_starts(ids, real, words.tgt_continues, words.tgt_joins_back).tolist() == [2, 2]


def test_beam_search_counts_a_row_with_its_next_piece_by_that_piece():
    words = WordBoundaries.of(VOCAB, VOCAB, "sentencepiece")
    # rows "▁the new" (1 word), one with no piece yet, and "▁the ▁" (2: the second word begun)
    part = SimpleNamespace(history=torch.tensor([[4, 5], [0, 0], [4, 8]]), steps=[2, 0, 2])
    rows = _RowWords.of(part, 1, words.tgt_continues, words.tgt_joins_back)
    assert rows.words.tolist() == [1, 0, 2]
    # each row with "found" (6, no ▁) and with "▁the" (4)
    found = rows.with_next(torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([6, 4, 6, 4, 6, 4]))
    assert found.tolist() == [1, 2, 1, 1, 2, 2]
    bpe = WordBoundaries.of(VOCAB, VOCAB, "bpe")  # "▁ends@@" goes on: BPE's rows as before
    part = SimpleNamespace(history=torch.tensor([[4, 10]]), steps=[2])
    rows = _RowWords.of(part, 1, bpe.tgt_continues, bpe.tgt_joins_back)
    assert rows.words.tolist() == [2] and rows.with_next(torch.tensor([0]), torch.tensor([4])).tolist() == [2]


def test_the_analyses_group_pieces_into_the_words_decoding_gives():
    pieces = ["▁the", "new", "found", "land", "▁", "Жук", "▁", "▁."]
    groups = word_groups(pieces, "sentencepiece")
    assert groups == [[0, 1, 2, 3], [4, 5], [6, 7]]
    assert [join_word(pieces, g, "sentencepiece") for g in groups] == ["thenewfoundland", "Жук", "."]
    assert word_groups(["new@@", "found", "land"]) == [[0, 1], [2]]  # BPE's, the default


def test_the_training_word_ratio_counts_sentencepiece_words(fitted):
    src = ["el gato come .", "el perro ve el sol .", "el sol ."]
    tgt = ["the cat eats .", "the dog sees the big sun .", "the big red sun ."]
    src_pieces, tgt_pieces = fitted.encode_many(src, "src"), fitted.encode_many(tgt, "tgt")
    vocab = Vocab(sorted({p for pieces in src_pieces + tgt_pieces for p in pieces}))
    split = TokenArrays.from_lists([vocab.encode(p, add_eos=False) for p in src_pieces],
                                   [vocab.encode(p) for p in tgt_pieces])
    # W(y)/W(x) in words: 4/4, 7/6 and 5/3, whatever the pieces; the median 7/6
    assert length_ratios(split, vocab, vocab, "sentencepiece")["words 0.5"] == 7 / 6


# -- prepare ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_prepare_gives_the_same_files_for_one_and_two_workers(corpus, tmp_path, monkeypatch, kind):
    """Several blocks (16 lines each) on one and on two workers, the corpus far below the size
    at which prepare forks."""
    monkeypatch.setattr(prepare_module, "prepare_training", functools.partial(stream.prepare_training, block_lines=16))
    monkeypatch.setattr(prepare_module, "SMALL_CORPUS_BYTES", 0)
    logged = []
    prepared = {}
    for workers in (1, 2):
        cfg = tmp_path / f"w{workers}.yaml"
        cfg.write_text(f"model_dir: {tmp_path / f'w{workers}'}\ndata: {{corpus: files, dir: {corpus}, subwords: "
                       f"sentencepiece, sentencepiece_vocab: 60, sentencepiece_type: {kind}, max_len: 100}}\n")
        prepare(load_config(cfg), log=logged.append, workers=workers)
        prep = tmp_path / f"w{workers}" / "prep"
        prepared[workers] = {p.relative_to(prep): p.read_bytes() for p in prep.rglob("*") if p.is_file()}
    assert "prepare: 121 training pairs read in 8 blocks on 2 worker(s)" in logged
    assert Path("preprocess/preprocess.sentencepiece.joint") in prepared[1]
    assert prepared[1] == prepared[2]
    vocab = (tmp_path / "w1" / "prep" / "vocab.src").read_text(encoding="utf-8").split()
    assert any(token.startswith(WORD_START) for token in vocab) and not any("@@" in t for t in vocab)
