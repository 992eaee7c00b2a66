import json
import shutil

import pytest

from ctxnmt.cli import main
from ctxnmt.data import bible
from ctxnmt.data.corpus import read_lines
from ctxnmt.errors import DataError

# Shaped like `diatheke -f plain` output of the KJV: a repeated heading before
# indented verses, a pilcrow, blank lines, trailing spaces and the module footer.
KJV_LIKE = """\
Genesis 1:1: ¶ In the beginning God created the heaven and the earth.  
Genesis 1:2: And the earth was without form,
and void.

The Creation.
   Genesis 1:3: And God said, Let there be light.
The Creation.
   Genesis 1:4: 
I Samuel 3:1: And the child Samuel ministered.
Revelation of John 22:21: The grace of our Lord Jesus Christ be with you all. Amen.    
(engKJV2006eb)
"""

RV_LIKE = """\
Genesis 1:1: EN el principio crió Dios <H430> los cielos y la tierra.
Genesis 1:2: Y la tierra estaba desordenada y vacía,<H922>   y las tinieblas <i>estaban</i> sobre la haz del abismo.
Genesis 1:3: Y dijo Dios: Sea la luz.
Genesis 1:4: Y vió Dios que la luz era buena.
I Samuel 3:1: Y el joven Samuel ministraba.
Revelation of John 22:21: La gracia de nuestro Señor Jesucristo <G5547> sea con todos vosotros. Amén.   
(spaRV1909eb)
"""


def test_parse_dump_kjv_like():
    verses = bible.parse_dump(KJV_LIKE)
    assert verses == {
        ("Genesis", 1, 1): "In the beginning God created the heaven and the earth.",
        ("Genesis", 1, 2): "And the earth was without form, and void.",
        ("Genesis", 1, 3): "And God said, Let there be light.",
        ("Genesis", 1, 4): "",
        ("I Samuel", 3, 1): "And the child Samuel ministered.",
        ("Revelation of John", 22, 21): "The grace of our Lord Jesus Christ be with you all. Amen.",
    }
    assert list(verses)[-1] == ("Revelation of John", 22, 21)  # footer gone, order kept


def test_parse_dump_strips_strongs_tags_and_markup():
    verses = bible.parse_dump(RV_LIKE)
    assert verses[("Genesis", 1, 1)] == "EN el principio crió Dios los cielos y la tierra."
    assert verses[("Genesis", 1, 2)] == (
        "Y la tierra estaba desordenada y vacía, y las tinieblas estaban sobre la haz del abismo."
    )
    assert verses[("Revelation of John", 22, 21)].endswith("Jesucristo sea con todos vosotros. Amén.")
    assert not any("<" in text or "¶" in text for text in verses.values())


def test_parse_dump_rejects_text_before_first_verse():
    with pytest.raises(DataError, match=r"^dump:1: text before the first verse"):
        bible.parse_dump("stray text\nGenesis 1:1: text\n", source="dump")


def test_parse_dump_rejects_duplicate_verse():
    with pytest.raises(DataError, match=r"^dump:2: Genesis 1:1 appears twice"):
        bible.parse_dump("Genesis 1:1: a\nGenesis 1:1: b\n", source="dump")


def test_parse_heading_of_single_verse_dump():
    with_title = "A Psalm of David, when he fled from Absalom his son.\n   Psalms 3:1: LORD, how are they increased. \n\n(engKJV2006eb)\n"
    without = "Psalms 1:1: Blessed is the man. \n\n(engKJV2006eb)\n"
    assert bible.parse_heading(with_title) == "A Psalm of David, when he fled from Absalom his son."
    assert bible.parse_heading(without) is None


def test_add_psalm_titles_prepends_once():
    verses = {("Psalms", 3, 1): "LORD, how.", ("Psalms", 3, 2): "Many there be.", ("Psalms", 4, 1): "Hear me."}
    assert bible.add_psalm_titles(verses, {3: "A Psalm of David.", 99: "No such psalm."}) == 1
    assert verses == {("Psalms", 3, 1): "A Psalm of David. LORD, how.", ("Psalms", 3, 2): "Many there be.", ("Psalms", 4, 1): "Hear me."}


def test_align_drops_empty_and_missing_verses():
    src = {("A", 1, 1): "uno", ("A", 1, 2): "", ("A", 1, 3): "tres", ("A", 1, 4): "cuatro"}
    tgt = {("A", 1, 1): "one", ("A", 1, 2): "two", ("A", 1, 3): "", ("A", 1, 5): "five"}
    keys, dropped = bible.align(src, tgt)
    assert keys == [("A", 1, 1)]
    assert dropped == {"missing_src": 1, "missing_tgt": 1, "empty_src": 1, "empty_tgt": 1}


def test_suspect_chapters_around_empty_verses():
    src = {("A", 1, 1): "x", ("A", 1, 2): "", ("A", 2, 1): "x", ("A", 3, 1): "", ("A", 3, 2): "x", ("B", 1, 1): "x"}
    tgt = {key: "y" for key in src}
    assert bible.suspect_chapters(src, tgt) == [("A", 1), ("A", 2), ("A", 3)]
    src[("A", 3, 1)], src[("A", 3, 2)] = "x", ""  # last chapter of a book: the next book is not affected
    assert bible.suspect_chapters(src, tgt) == [("A", 1), ("A", 2), ("A", 3)]


def test_split_rule_on_chapter_indices():
    assert [bible.split_of(i) for i in (0, 6, 7, 8, 31, 32, 33, 57, 82, 1157, 1182)] == [
        "train", "train", "dev", "train", "train", "test", "train", "dev", "test", "dev", "test"
    ]
    splits = [bible.split_of(i) for i in range(1189)]
    assert (splits.count("dev"), splits.count("test")) == (24, 24)


def test_chapter_indices_and_document_ids():
    keys = [("Genesis", 1, 1), ("Genesis", 1, 2), ("Genesis", 2, 1), ("I Samuel", 3, 1)]
    assert bible.chapter_indices(keys) == {("Genesis", 1): 0, ("Genesis", 2): 1, ("I Samuel", 3): 2}
    assert bible.document_id("I Samuel", 3) == "I_Samuel.3"
    assert bible.document_id("Song of Solomon", 1) == "Song_of_Solomon.1"


def test_missing_diatheke_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(bible.shutil, "which", lambda name: None)
    with pytest.raises(DataError, match="apt-get install diatheke sword-text-sparv sword-text-kjv"):
        bible.build_bible(tmp_path / "out", log=lambda message: None)


@pytest.fixture(scope="module")
def built_bible(bible_corpus):
    return bible_corpus


@pytest.mark.skipif(shutil.which("diatheke") is None, reason="needs diatheke and the SWORD modules")
def test_build_bible(built_bible):
    out, stats = built_bible
    expected = {"train": 29_900, "dev": 617, "test": 563}
    for split, size in expected.items():
        lines = {suffix: read_lines(out / f"{split}.{suffix}") for suffix in ("es", "en", "doc")}
        assert len(lines["es"]) == len(lines["en"]) == len(lines["doc"]) == stats["splits"][split]["lines"]
        assert abs(len(lines["es"]) - size) <= 0.02 * size
        for text in lines["es"] + lines["en"]:
            assert text and "<" not in text and "¶" not in text and text == text.strip()
        assert all(" " not in doc for doc in lines["doc"])
    english = read_lines(out / "train.en")
    title = "A Psalm of David, when he fled from Absalom his son."
    psalm_3_1 = english[read_lines(out / "train.doc").index("Psalms.3")]
    assert psalm_3_1.startswith(title + " LORD, how are they increased")
    assert psalm_3_1.count(title) == 1
    assert sum(title in line for line in english) == 1
    assert 0 < stats["dropped"] <= 40
    assert "Numbers.13" in stats["suspect_chapters"]
    assert json.loads((out / "stats.json").read_text(encoding="utf-8"))["dropped"] == stats["dropped"]


@pytest.mark.skipif(shutil.which("diatheke") is None, reason="needs diatheke and the SWORD modules")
def test_cli_reuses_existing_build(built_bible, capsys):
    out, stats = built_bible
    assert main(["data", "bible", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "reusing" in captured.err
    assert f"train: {stats['splits']['train']['lines']} verse pairs" in captured.out
    assert f"dropped: {stats['dropped']}" in captured.out


@pytest.mark.skipif(shutil.which("diatheke") is None, reason="needs diatheke and the SWORD modules")
def test_modified_build_is_not_reused(built_bible, tmp_path):
    out, _ = built_bible
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    assert bible._existing_build(str(copy)) is not None
    (copy / "dev.en").write_text("tampered\n", encoding="utf-8")
    assert bible._existing_build(str(copy)) is None
