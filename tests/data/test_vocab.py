import pytest

from ctxnmt.data.vocab import BOS, EOS, PAD, UNK, Vocab
from ctxnmt.errors import DataError

SENTENCES = [["b", "a", "c"], ["a", "c", "d"], ["a", "e"], ["<unk>", "b"]]


def test_specials_come_first():
    vocab = Vocab.build(SENTENCES)
    assert [vocab.token(i) for i in (PAD, UNK, EOS, BOS)] == ["<pad>", "<unk>", "</s>", "<s>"]
    assert (PAD, UNK, EOS, BOS) == (0, 1, 2, 3)


def test_build_orders_by_frequency_then_alphabetically():
    vocab = Vocab.build(SENTENCES)
    assert vocab.tokens()[4:] == ["a", "b", "c", "d", "e"]
    assert Vocab.build(list(reversed(SENTENCES))) == vocab


def test_build_max_size_and_min_freq():
    assert Vocab.build(SENTENCES, max_size=2).tokens()[4:] == ["a", "b"]
    assert Vocab.build(SENTENCES, min_freq=2).tokens()[4:] == ["a", "b", "c"]
    assert len(Vocab.build(SENTENCES, max_size=2)) == 6


def test_encode_decode():
    vocab = Vocab.build(SENTENCES)
    ids = vocab.encode(["a", "zzz", "e"])
    assert ids == [vocab.index("a"), UNK, vocab.index("e"), EOS]
    assert vocab.encode(["a"], add_eos=False) == [vocab.index("a")]
    assert vocab.decode([BOS, vocab.index("a"), PAD, vocab.index("b"), EOS, vocab.index("c")]) == ["a", "b"]
    assert vocab.index("zzz") == UNK


def test_a_special_symbol_spelt_in_the_text_is_an_unknown_word():
    """With tokenize: false a literal "<pad>" or "</s>" reaches the vocabulary: as the symbol it
    would be masked as padding, or end the output at decoding."""
    vocab = Vocab.build([["a", "<pad>", "</s>", "<s>", "b"]])
    ids = vocab.encode(["a", "<pad>", "</s>", "<s>", "<unk>", "b"])
    assert ids == [vocab.index("a"), UNK, UNK, UNK, UNK, vocab.index("b"), EOS]
    assert vocab.decode(ids) == ["a", "<unk>", "<unk>", "<unk>", "<unk>", "b"]


def test_save_load_round_trip_and_fingerprint(tmp_path):
    vocab = Vocab.build(SENTENCES)
    path = tmp_path / "vocab.src"
    vocab.save(path)
    assert path.read_text(encoding="utf-8").splitlines()[:5] == ["<pad>", "<unk>", "</s>", "<s>", "a"]
    loaded = Vocab.load(path)
    assert loaded == vocab and loaded.fingerprint() == vocab.fingerprint()
    assert len(vocab.fingerprint()) == 16
    assert Vocab.build(SENTENCES, max_size=2).fingerprint() != vocab.fingerprint()


def test_load_rejects_bad_files(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("<pad>\n<unk>\n<s>\n</s>\na\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"vocab\.txt:3: expected special symbol '</s>'"):
        Vocab.load(path)
    path.write_text("<pad>\n<unk>\n</s>\n<s>\na\nb\na\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"vocab\.txt:7: token 'a' already on line 5"):
        Vocab.load(path)


def test_token_out_of_range():
    with pytest.raises(IndexError):
        Vocab.build(SENTENCES).token(99)
