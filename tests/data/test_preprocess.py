import json

import pytest
from sacremoses import MosesTruecaser

from ctxnmt.data.preprocess import Preprocessor, line_start_only, truecase_tokens
from ctxnmt.errors import CheckpointError, ConfigError
from tests.data.conftest import learned_pipeline

SRC = [
    "El gato se sentó en la alfombra.",
    "¿Dónde está el perro?",
    "El perro duerme en la casa de María.",
    "La casa es grande, y el jardín es verde.",
    "María tiene un gato y un perro.",
    "Los niños juegan en el jardín.",
    "El gato duerme. El perro también duerme.",
    "Juan dijo: «vamos a la casa».",
] * 3
TGT = [
    "The cat sat on the mat.",
    "Where is the dog?",
    "The dog sleeps in Mary's house.",
    "The house is big, and the garden is green.",
    "Mary has a cat and a dog.",
    "The children play in the garden.",
    "The cat sleeps. The dog sleeps too.",
    'John said: "let us go to the house."',
] * 3
OPTIONS = dict(src_lang="es", tgt_lang="en", bpe_merges=40)


@pytest.fixture(scope="module", params=[True, False], ids=["joint", "separate"])
def fitted(request, tmp_path_factory):
    return learned_pipeline(tmp_path_factory.mktemp("fit"), SRC, TGT, joint_bpe=request.param, **OPTIONS)


def test_encode_tokenises_truecases_and_segments(fitted):
    tokens = fitted.encode("The cat sat on the mat.", "tgt")
    assert "".join(tokens).replace("@@", "") == "thecatsatonthemat."
    assert tokens[0].startswith("the") and tokens[-1] == "."
    assert any(token.endswith("@@") for token in fitted.encode("Dondequiera duermen", "src"))


@pytest.mark.parametrize("sentence", [
    "The cat sat on the mat.",
    "Where is the dog?",
    "The house is big, and the garden is green.",
    "The cat sleeps. The dog sleeps too.",
    "Mary's unknown zebra jumps over 3 fences.",
    "The waters returned: and after the end, the dog slept!",
    "The man’s brother’s house, for the brethren’ sake.",
])
def test_round_trip_english(fitted, sentence):
    assert fitted.decode(fitted.encode(sentence, "tgt"), "tgt") == sentence


@pytest.mark.parametrize("sentence", [
    "El gato se sentó en la alfombra.",
    "María tiene un gato nuevo.",
    "¿Dónde está el perro?",
    "Juan dijo: vamos a la casa. El perro duerme.",
])
def test_round_trip_spanish(fitted, sentence):
    assert fitted.decode(fitted.encode(sentence, "src"), "src") == sentence


def test_encode_many_matches_encode(fitted):
    lines = TGT[:8] + ["An entirely new sentence."]
    assert fitted.encode_many(lines, "tgt") == [fitted.encode(line, "tgt") for line in lines]
    assert fitted.encode_many(SRC, "src") == [fitted.encode(line, "src") for line in SRC]


def test_save_load_gives_identical_encodings(fitted, tmp_path):
    fitted.save(tmp_path)
    loaded = Preprocessor.load(tmp_path)
    assert loaded.options == fitted.options
    probe = ["The dog sleeps in the big garden.", "Unseen words: zebra, Qatar."]
    for side, lines in (("src", SRC + probe), ("tgt", TGT + probe)):
        assert loaded.encode_many(lines, side) == fitted.encode_many(lines, side)
    record = json.loads((tmp_path / "preprocess.json").read_text(encoding="utf-8"))
    assert record["options"]["bpe_merges"] == 40


@pytest.mark.parametrize("at_line_start_only", [True, False])
def test_fast_truecasing_matches_sacremoses(at_line_start_only):
    lines = ["The cat sat .", "the Cat sat on the mat .", "Mary saw the cat . The end", "( The ) cat", "¿ Dónde ?"]
    tokenised = [line.split() for line in lines]
    truecaser = line_start_only(MosesTruecaser()) if at_line_start_only else MosesTruecaser()
    truecaser.train(tokenised)
    for tokens in tokenised + [["THE", "CAT", "?", "the", "Mary"], ["a|b", "The"], ["¡", "The", "end", "!"]]:
        assert truecase_tokens(truecaser, tokens) == truecaser.truecase(" ".join(tokens), use_known=True)


def words(tokens):
    return " ".join(tokens).replace("@@ ", "").split()


def test_only_the_line_start_is_lowercased(fitted):
    assert words(fitted.encode("The cat sleeps. The dog sleeps too.", "tgt")) == [
        "the", "cat", "sleeps", ".", "The", "dog", "sleeps", "too", "."
    ]
    assert words(fitted.encode("¿El perro duerme?", "src"))[:2] == ["¿", "el"]


def test_no_tokenise_no_truecase_no_bpe_is_whitespace_split(tmp_path):
    plain = learned_pipeline(tmp_path, SRC, TGT, src_lang="es", tgt_lang="en", tokenize=False, truecase=False)
    assert plain.encode("The  cat,\u00a0sat.", "tgt") == ["The", "cat,", "sat."]
    assert plain.decode(["The", "cat,", "sat."], "tgt") == "The cat, sat."


def test_bad_options_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown option"):
        learned_pipeline(tmp_path, SRC, TGT, src_lang="es", tgt_lang="en", bpe=10)
    with pytest.raises(ConfigError, match="bpe_merges"):
        learned_pipeline(tmp_path, SRC, TGT, src_lang="es", tgt_lang="en", bpe_merges=-1)


def test_load_reports_missing_and_corrupt_files(tmp_path, fitted):
    with pytest.raises(CheckpointError, match="preprocess.json: no such file"):
        Preprocessor.load(tmp_path)
    fitted.save(tmp_path)
    codes = tmp_path / ("preprocess.bpe.joint" if fitted.options.joint_bpe else "preprocess.bpe.src")
    codes.write_text("#version: 0.2\na b\nbroken\n", encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"preprocess\.bpe\.\w+:3: a BPE code"):
        Preprocessor.load(tmp_path)


def test_the_bpe_cache_stays_bounded_and_never_changes_a_segmentation(fitted, monkeypatch):
    """A server meets ever new words: the remembered segmentations are capped (cleared when
    full), and a word segments the same whether remembered or not."""
    from ctxnmt.data import preprocess

    words = "zebra dondequiera duermen alfombra jardín perro gato casa María".split()
    expected = [fitted.encode(word, "src") for word in words]
    monkeypatch.setattr(preprocess, "BPE_CACHE_WORDS", 3)
    side = fitted._side("src")
    side.bpe_cache.clear()
    for _ in range(2):
        assert [fitted.encode(word, "src") for word in words] == expected
        assert len(side.bpe_cache) <= 3
