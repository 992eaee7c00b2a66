"""The one data path: prepared pairs as memory-mapped arrays, prepared block by block on any number
of workers, batched from the lengths.  Each test holds the new path against what the earlier
one computed (its algorithm written out here: the list batcher, the one-pass pipeline)."""
from __future__ import annotations

import filecmp
import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from sacremoses import MosesTruecaser

from ctxnmt.config import load_config
from ctxnmt.data import prepare as prepare_module
from ctxnmt.data import stream
from ctxnmt.data.batching import epoch_batches, make_batch, padding_ratio
from ctxnmt.data.documents import PreviousSentences, document_runs, previous_sentences
from ctxnmt.data.indexed import TokenArrays
from ctxnmt.data.prepare import OLD_DATA, prepare
from ctxnmt.data.preprocess import (Preprocessor, SidePipeline, learn_codes, line_start_only,
                                    truecase_tokens)
from ctxnmt.data.settings import DataConfig
from ctxnmt.data.vocab import EOS, PAD, Vocab
from ctxnmt.errors import DataError
from tests.training.conftest import tiny_config, write_corpus


def reference_batches(src_lens, tgt_lens, batch_tokens, batch_sents, seed, epoch, shuffle=True):
    """The batches as the list-based builder made them: shuffle, stable sort by (target, source)
    length, fill greedily under both caps, shuffle the batches."""
    n = len(tgt_lens)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(n, generator=gen).tolist() if shuffle else list(range(n))
    order.sort(key=lambda i: (tgt_lens[i], src_lens[i]))
    batches, current, tokens = [], [], 0
    for i in order:
        if current and (len(current) >= batch_sents or tokens + tgt_lens[i] > batch_tokens):
            batches.append(current)
            current, tokens = [], 0
        current.append(i)
        tokens += tgt_lens[i]
    if current:
        batches.append(current)
    if shuffle:
        batches = [batches[p] for p in torch.randperm(len(batches), generator=gen).tolist()]
    return batches


def test_the_batches_are_the_list_builders_in_the_same_order():
    rng = random.Random(0)
    for trial in range(40):
        n = rng.randint(0, 2000)
        src = [rng.randint(0, 90) for _ in range(n)]
        tgt = [rng.randint(1, 90) for _ in range(n)]
        caps = rng.choice([1, 50, 400, 2600, 10**6]), rng.choice([1, 7, 100, 10**6])
        for shuffle in (True, False):
            expected = reference_batches(src, tgt, *caps, trial, trial % 3, shuffle)
            found = epoch_batches(np.array(src), np.array(tgt), *caps, trial, trial % 3, shuffle)
            assert list(found) == expected and list(found[5:]) == expected[5:] and len(found) == len(expected)


def test_padding_ratio_counts_the_padded_cells():
    batches = [[0, 1], [2]]
    assert padding_ratio(batches, [1, 3, 2], [4, 4, 1]) == (1 - 6 / 8, 0.0)  # source: 2×3 + 1×2 cells, 6 real


def test_a_batch_is_padded_as_written_out():
    src, tgt = [[5, 6, 7], [8], [9, 10]], [[11, EOS], [12, 13, EOS], [EOS]]
    pairs = TokenArrays.from_lists(src, tgt)
    batch = make_batch([2, 0], pairs.src, pairs.tgt, [[], [], [0, 1]], 3)
    assert batch.src.tolist() == [[9, 10, PAD], [5, 6, 7]] and batch.tgt.tolist() == [[EOS, PAD], [11, EOS]]
    assert batch.src_mask.tolist() == [[1, 1, 0], [1, 1, 1]] and batch.indices.tolist() == [2, 0]
    # sentence 2's context: sentences 0 and 1 in slots 0 and 1, slot 2 empty; sentence 0 has none
    assert batch.context.ids.tolist() == [[[5, 6, 7], [8, PAD, PAD], [PAD] * 3], [[PAD] * 3] * 3]
    assert batch.context.mask.sum().item() == 4


def test_previous_sentences_from_the_document_numbers_are_the_listed_ones():
    docs = ["a"] * 5 + ["b"] + ["c"] * 3 + ["a2"] * 7
    runs, problem = document_runs(docs)
    assert problem == "" and runs.tolist() == [0] * 5 + [1] + [2] * 3 + [3] * 7
    rows = np.arange(len(docs))
    for k in (1, 2, 3):
        positions, count = PreviousSentences(runs, k).positions(rows)
        found = [positions[i, :count[i]].tolist() for i in rows]
        assert found == previous_sentences(docs, k)
    assert document_runs(["a", "b", "a"])[1].startswith("3: document 'a' (first at line 1) continues")
    assert document_runs(["a", " "])[1] == "2: empty document id"


def corpus_lines(n: int, seed: int = 1) -> tuple[list[str], list[str], list[str]]:
    rng = random.Random(seed)
    words = "Casa perro gato El la Luna sol agua come bebe ve Dios dijo".split()
    src, tgt, docs = [], [], []
    for i in range(n):
        sent = [rng.choice(words) for _ in range(rng.randint(0 if i % 37 == 5 else 1, 14))]
        src.append(" ".join(sent) + (" ." if sent else ""))
        tgt.append(" ".join(reversed(sent)).lower() + " .")
        docs.append(f"d{i // 6}")
    src[10], tgt[10] = src[3], tgt[3]  # a duplicate pair
    src[20] = tgt[20]  # a pair whose sides are the same text
    src[30], tgt[30] = "uno dos tres cuatro cinco seis siete ocho nueve diez once", "one"  # a word ratio of 11
    return src, tgt, docs


def write(out: Path, src, tgt, docs=None) -> tuple[str, str, str | None]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext, lines in (("es", src), ("en", tgt), ("doc", docs)):
        if lines is not None:
            (out / f"train.{ext}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            paths.append(str(out / f"train.{ext}"))
    return paths[0], paths[1], paths[2] if docs is not None else None


OPTIONS = DataConfig(src_lang="es", tgt_lang="en", bpe_merges=30)


def one_pass_pipeline(src: list[str], tgt: list[str]) -> Preprocessor:
    """The pipeline learned in one pass over the whole corpus in memory: each side's Moses words,
    a truecaser trained on every line of them, and BPE on the truecased words' counts."""
    truecasers, counts = {}, {}
    for side, lines in (("src", src), ("tgt", tgt)):
        words = [SidePipeline(OPTIONS.lang(side), True, None, None).words(line) for line in lines]
        truecasers[side] = line_start_only(MosesTruecaser())
        truecasers[side].train(words)
        counts[side] = Counter(w for line in words for w in truecase_tokens(truecasers[side], line))
    return Preprocessor(OPTIONS, truecasers, learn_codes(OPTIONS, counts))


def run_stream(tmp_path: Path, name: str, paths, workers: int, cleaning=stream.Cleaning(), max_len=12):
    out = tmp_path / name
    result = stream.prepare_training(OPTIONS, paths, out / "train", out / "work", max_len, 0, cleaning, workers,
                                     log=lambda line: None, block_lines=23)
    return out / "train", result


def test_streaming_on_any_number_of_workers_is_the_one_pass_pipeline(tmp_path):
    src, tgt, docs = corpus_lines(300)
    paths = write(tmp_path / "corpus", src, tgt, docs)
    one, result = run_stream(tmp_path, "one", paths, workers=1)
    two, _ = run_stream(tmp_path, "two", paths, workers=2)
    for name in ("src.bin", "src.idx", "tgt.bin", "tgt.idx", "doc.bin", "meta.json"):
        assert filecmp.cmp(one / name, two / name, shallow=False), name
    # the same as learning on the whole corpus in memory, then encoding and filtering it
    fitted = one_pass_pipeline(src, tgt)
    assert result.codes == fitted._bpe_codes
    for side in ("src", "tgt"):
        assert result.truecasers[side].model["best"] == fitted._truecase_models[side].model["best"]
    src_tok, tgt_tok = fitted.encode_many(src, "src"), fitted.encode_many(tgt, "tgt")
    empty = sum(not s or not t for s, t in zip(src_tok, tgt_tok))  # an empty side counts as empty, not too long
    kept = [i for i, (s, t) in enumerate(zip(src_tok, tgt_tok)) if s and t and max(len(s), len(t)) <= 12]
    too_long = len(src_tok) - len(kept) - empty
    assert (result.counts.too_long, result.counts.empty) == (too_long, empty) and empty > 0 and too_long > 0
    vocab = Vocab.build([src_tok[i] for i in kept] + [tgt_tok[i] for i in kept])
    assert result.src_vocab == vocab == result.tgt_vocab
    arrays = TokenArrays.open(one)
    assert list(arrays.src) == [vocab.encode(src_tok[i], add_eos=False) for i in kept]
    assert list(arrays.tgt) == [vocab.encode(tgt_tok[i]) for i in kept]
    assert arrays.docs.tolist() == document_runs([docs[i] for i in kept])[0].tolist()
    assert arrays.src.ids.dtype == np.uint16


def test_the_cleaning_filters_drop_and_count_what_they_say(tmp_path):
    src, tgt, docs = corpus_lines(120)
    paths = write(tmp_path / "corpus", src, tgt, docs)
    cleaning = stream.Cleaning(max_ratio=9, duplicates=True, identical=True)
    out, result = run_stream(tmp_path, "clean", paths, 2, cleaning, max_len=100)
    seen, copies, identical = set(), 0, 0  # the filters in their order: copies first, then identical sides
    for pair in zip(src, tgt):
        copies, identical = copies + (pair in seen), identical + (pair not in seen and pair[0] == pair[1])
        seen.add(pair)
    assert (result.counts.duplicates, result.counts.identical, result.counts.ratio) == (copies, identical, 1)
    assert copies >= 1 and identical >= 1 and result.pairs_read == 120
    assert result.pairs_kept == 120 - copies - identical - 1 - result.counts.empty
    plain, _ = run_stream(tmp_path, "plain", paths, 1, max_len=100)
    assert len(TokenArrays.open(plain)) == 120 - result.counts.empty


def prepared_config(tmp_path: Path, corpus: Path, **data) -> object:
    cfg = tiny_config(tmp_path / "c.yaml", corpus, tmp_path / "m")
    return load_config(cfg, [f"data.{k}={v}" for k, v in data.items()])


def test_invalid_utf8_in_a_late_block_names_file_and_line_and_keeps_the_old_prep(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus", n_train=400)
    config = prepared_config(tmp_path, corpus)
    prepare(config, log=lambda line: None)
    before = {p: p.read_bytes() for p in (tmp_path / "m" / "prep").rglob("*") if p.is_file()}
    lines = (corpus / "train.en").read_bytes().split(b"\n")
    lines[356] = b"the \xff cat"
    (corpus / "train.en").write_bytes(b"\n".join(lines))
    monkeypatch.setattr(stream, "BLOCK_LINES", 50)
    monkeypatch.setattr(prepare_module, "SMALL_CORPUS_BYTES", 0)  # two workers, eight blocks
    with pytest.raises(DataError, match=rf"^{corpus / 'train.en'}:357: invalid UTF-8 \(byte 0xff at column 5\)$"):
        prepare(config, log=lambda line: None, workers=2)
    assert before == {p: p.read_bytes() for p in (tmp_path / "m" / "prep").rglob("*") if p.is_file()}
    assert not (tmp_path / "m" / "prep.partial").exists()


def test_misaligned_and_huge_lines_are_one_line_errors(tmp_path, monkeypatch):
    src, tgt, docs = corpus_lines(60)
    paths = write(tmp_path / "c1", src, tgt[:-1], docs)
    with pytest.raises(DataError, match=r"train\.es has 60 lines but .*train\.en has 59$"):
        run_stream(tmp_path, "a", paths, 1)
    paths = write(tmp_path / "c2", src, tgt, docs + ["extra"])
    with pytest.raises(DataError, match=r"train\.es has 60 lines but .*train\.doc has 61$"):
        run_stream(tmp_path, "b", paths, 1)
    monkeypatch.setattr(stream, "MAX_LINE_BYTES", 200)
    paths = write(tmp_path / "c3", src[:40] + ["x" * 300] + src[41:], tgt, docs)
    with pytest.raises(DataError, match=r"train\.es:41: a line of more than 200 bytes"):
        run_stream(tmp_path, "c", paths, 1)


def test_a_preparation_stopped_half_way_leaves_nothing_a_training_would_read(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus")
    config = prepared_config(tmp_path, corpus)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(stream, "_write_arrays", killed)
    with pytest.raises(KeyboardInterrupt):
        prepare(config, log=lambda line: None)
    assert not (tmp_path / "m").exists()  # a failed first preparation removes the model directory it made
    monkeypatch.undo()
    (tmp_path / "m" / "prep.partial").mkdir(parents=True)  # what a kill -9 would leave: no fingerprint, never read
    (tmp_path / "m" / "prep.partial" / "junk").write_text("x")
    prepared = prepare(config, log=lambda line: None)
    assert len(prepared.train) == 121 and not (tmp_path / "m" / "prep.partial").exists()


def test_a_directory_prepared_in_the_older_form_is_read_as_it_is(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    config = prepared_config(tmp_path, corpus)
    new = prepare(config, log=lambda line: None)
    prep = tmp_path / "m" / "prep"
    old_train = {"src": list(new.train.src), "tgt": list(new.train.tgt), "raw_src": [], "raw_tgt": [],
                 "docs": [f"doc{i // 4}" for i in range(len(new.train))]}
    old_dev = {"src": list(new.dev.src), "tgt": list(new.dev.tgt), "raw_src": [], "raw_tgt": new.references,
               "docs": [f"doc{i // 4}" for i in range(len(new.dev))]}
    torch.save({"train": old_train, "dev": old_dev}, prep / OLD_DATA)
    shutil.rmtree(prep / "train")
    shutil.rmtree(prep / "dev")
    said = []
    old = prepare(config, log=said.append)
    assert list(old.train.src) == list(new.train.src) and list(old.train.tgt) == list(new.train.tgt)
    assert old.train.docs.tolist() == new.train.docs.tolist()
    assert list(old.dev.src) == list(new.dev.src) and list(old.dev.tgt) == list(new.dev.tgt)
    assert old.dev.docs.tolist() == new.dev.docs.tolist() and old.references == new.references
    assert len(said) == 1 and "older form of prepared data, read into memory as it is" in said[0]
    assert old.length_ratios() == new.length_ratios()


def test_misaligned_training_files_are_refused_before_any_work(tmp_path):
    src, tgt, docs = corpus_lines(40)
    paths = write(tmp_path / "c", src, tgt, docs)
    Path(paths[1]).write_bytes(Path(paths[1]).read_bytes().rstrip(b"\n"))  # no final newline: still 40 lines
    stream.check_aligned(paths)
    assert stream.count_lines(paths[1]) == 40
    Path(paths[2]).write_text("".join(d + "\n" for d in docs[:-2]), encoding="utf-8")
    with pytest.raises(DataError, match=r"train\.es has 40 lines but .*train\.doc has 38$"):
        stream.check_aligned(paths)
