"""The rules of experiments/pronouns/build_bible_set.py on small literal verses, and its output's stability.

The script is a standalone experiment, not part of the package, so it is loaded from its path."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "experiments" / "pronouns" / "build_bible_set.py"
KEYS = ["document id", "segment id", "line", "source", "context", "ref segment", "src pronoun",
        "ref pronoun", "class", "ante distance", "intrasegmental", "errors"]


def _load():
    spec = importlib.util.spec_from_file_location("build_bible_set", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


bbs = _load()

# "Moses" and "Sarah" are people, "Hebron" a place; the other words are ordinary lower-case ones
LEX = bbs.Lexicon(lowercase=frozenset("and said went it rained with her suburbs thus saith the".split()),
                  places=frozenset({"Hebron"}), people=frozenset({"Moses", "Jacob", "Sarah"}))


def chapter(es: list[str], en: list[str], links: list[str], doc: str = "Genesis.1", first: int = 1):
    parsed = [{tuple(map(int, link.split("-"))) for link in row.split()} for row in links]
    return bbs.Chapter(doc, first, es, en, parsed)


def records(ch) -> list[dict]:
    return [e.record() for e in bbs.chapter_examples(ch, LEX)]


# -- possessives ----------------------------------------------------------------------------------

def test_su_makes_a_possessive_with_the_other_three_possessives_as_errors():
    ch = chapter(["Y Jacob alzó sus ojos."], ["And Jacob lifted up his eyes."],
                 ["0-0 1-1 2-2 2-3 3-4 4-5 5-6"])
    [r] = records(ch)
    assert (r["class"], r["src pronoun"], r["ref pronoun"]) == ("possessive", "sus", "his")
    assert r["errors"] == [{"contrastive": "And Jacob lifted up her eyes.", "replacement": "her"},
                           {"contrastive": "And Jacob lifted up their eyes.", "replacement": "their"},
                           {"contrastive": "And Jacob lifted up its eyes.", "replacement": "its"}]


def test_a_capitalised_pronoun_keeps_its_capital_in_every_error():
    ch = chapter(["Y Jacob envejeció.", "Sus ojos se oscurecieron."],
                 ["And Jacob was old.", "His eyes were dim."],
                 ["0-0 1-1 2-2 2-3 3-4", "0-0 1-1 2-2 3-3 3-4"])
    [r] = records(ch)
    assert [x["contrastive"] for x in r["errors"]] == ["Her eyes were dim.", "Their eyes were dim.",
                                                       "Its eyes were dim."]
    assert (r["segment id"], r["line"], r["context"]) == (2, 2, ["Y Jacob envejeció."])


def test_only_the_aligned_occurrence_is_replaced():
    # the first "his" is left unaligned, so only the second is an example
    ch = chapter(["Y Moisés tomó la vara y su bastón."], ["And Moses took his rod and his staff."],
                 ["0-0 1-1 2-2 4-4 5-5 6-6 7-7 8-8"])
    [r] = records(ch)
    assert r["errors"][0]["contrastive"] == "And Moses took his rod and her staff."


def test_its_is_no_error_when_no_person_antecedent_is_found():
    # KJV's "her suburbs" of a town is modern "its suburbs": not a wrong choice
    ch = chapter(["Hebrón con sus ejidos."], ["Hebron with her suburbs."], ["0-0 1-1 2-2 3-3 4-4"])
    [r] = records(ch)
    assert [x["replacement"] for x in r["errors"]] == ["his", "their"]
    assert r["ante distance"] == 0


# -- subjects and objects -------------------------------------------------------------------------

def test_an_omitted_subject_is_found():
    ch = chapter(["Y dijo: Ven."], ["And he said, Come."], ["0-0 1-2 2-3 3-4 4-5"])
    [r] = records(ch)
    assert (r["class"], r["src pronoun"], r["ref pronoun"]) == ("subject", "", "he")
    assert [x["contrastive"] for x in r["errors"]] == ["And she said, Come.", "And they said, Come."]


def test_an_explicit_el_is_no_example_aligned_or_not():
    aligned = chapter(["Y él dijo: Ven."], ["And he said, Come."], ["0-0 1-1 2-2 3-3 4-4 5-5"])
    unaligned = chapter(["Y él dijo: Ven."], ["And he said, Come."], ["0-0 2-2 3-3 4-4 5-5"])
    assert records(aligned) == [] and records(unaligned) == []


def test_el_after_a_preposition_is_an_object_and_leaves_the_subject_open():
    assert not bbs.unlinked_subject("he", ["Y", "dijo", "de", "él"], set())
    assert bbs.unlinked_subject("he", ["Y", "él", "dijo"], set())
    assert not bbs.unlinked_subject("she", ["Y", "él", "dijo"], set())


@pytest.mark.parametrize("pronoun, following, aligned, expected", [
    ("he", "said", [], ("subject", "")),
    ("he", "said", ["dijo"], ("subject", "")),
    ("he", "said", ["él"], None),
    ("he", "said", ["Moisés"], None),       # a name is an explicit subject
    ("they", "said", ["los"], None),        # "los que": the article marks the number
    ("he", "that", [], None),               # "he that believeth": generic, not referring
    ("he", "goat", [], None),               # "an he goat"
    ("him", ",", ["le"], ("object", "le")),
    ("them", ",", ["les"], ("object", "les")),
    ("him", ",", ["le", "él"], None),
    ("her", "eyes", ["la"], None),          # "la" marks the feminine
    ("her", "eyes", ["sus"], ("possessive", "sus")),
])
def test_classify(pronoun, following, aligned, expected):
    assert bbs.classify(pronoun, following, aligned) == expected


# -- the antecedent tag ---------------------------------------------------------------------------

def distance(pronoun: str, verses: list[str]) -> int | None:
    words = [v.split() for v in verses]
    return bbs.antecedent(pronoun, words, len(words) - 1, words[-1].index(pronoun), LEX)[0]


def test_an_agreeing_name_earlier_in_the_verse_is_same_verse():
    assert distance("he", ["And Moses said , he went"]) == 0


def test_the_nearest_earlier_verse_with_an_agreeing_word_gives_the_distance():
    assert distance("he", ["Moses went .", "And it rained .", "And he said ."]) == 2
    assert distance("he", ["Moses went .", "it rained .", "it rained .", "it rained .", "And he said ."]) is None


def test_gender_and_number_must_agree():
    assert distance("he", ["And Sarah said , he went"]) is None
    assert distance("she", ["And Sarah said , she went"]) == 0
    assert distance("she", ["And the woman said , she went"]) == 0
    assert distance("they", ["And Moses and Jacob went , they said"]) == 0
    assert distance("they", ["And the men went , they said"]) == 0
    assert distance("they", ["And Moses went , they said"]) is None


def test_a_later_word_is_no_antecedent():
    assert distance("he", ["And he said unto Moses"]) is None


def test_the_addressee_and_the_formula_speaker_are_no_antecedents():
    assert distance("he", ["O LORD , he went"]) is None
    assert distance("he", ["Thus saith the Lord GOD , he went"]) is None
    assert distance("he", ["And the LORD said , he went"]) == 0


def test_a_place_is_she_and_they_but_not_he():
    assert distance("her", ["Hebron with her suburbs"]) == 0
    assert distance("they", ["in Hebron they said"]) == 0
    assert distance("he", ["in Hebron he said"]) is None


def test_the_tag_fields_follow_contrapro():
    ch = chapter(["Moisés fué.", "Y dijo."], ["Moses went.", "And he said."], ["0-0 1-1 2-2", "0-0 1-2 2-3"])
    [r] = records(ch)
    assert (r["ante distance"], r["intrasegmental"]) == (1, False)
    ch = chapter(["Y dijo."], ["And he said."], ["0-0 1-2 2-3"])
    [r] = records(ch)
    assert (r["ante distance"], r["intrasegmental"]) == (None, None)


# -- the files ------------------------------------------------------------------------------------

def write_corpus(root: Path) -> tuple[Path, Path]:
    data, alignments = root / "data", root / "alignments"
    data.mkdir()
    alignments.mkdir()
    (data / "train.en").write_text("Moses said unto them, and they went in Hebron.\nAnd he wept.\n",
                                   encoding="utf-8")
    splits = {"dev": (["Y Moisés tomó su vara.", "Y dijo: Ven."],
                      ["And Moses took his rod.", "And he said, Come."],
                      ["0-0 1-1 2-2 3-3 4-4 5-5", "0-0 1-2 2-3 3-4 4-5"]),
              "test": (["Y Jacob alzó sus ojos.", "Y lloró."],
                       ["And Jacob lifted up his eyes.", "And he wept."],
                       ["0-0 1-1 2-2 2-3 3-4 4-5 5-6", "0-0 1-2 2-3"])}
    for split, (es, en, links) in splits.items():
        (data / f"{split}.es").write_text("\n".join(es) + "\n", encoding="utf-8")
        (data / f"{split}.en").write_text("\n".join(en) + "\n", encoding="utf-8")
        (data / f"{split}.doc").write_text("Genesis.1\nGenesis.1\n", encoding="utf-8")
        (alignments / f"bible-{split}.silver.es-en.txt").write_text("\n".join(links) + "\n", encoding="utf-8")
    return data, alignments


def test_two_runs_write_the_same_bytes_with_exactly_the_contrapro_keys(tmp_path):
    data, alignments = write_corpus(tmp_path)
    outs = []
    for name in ("one", "two"):
        out = tmp_path / name
        out.mkdir()
        assert bbs.main(["--data", str(data), "--alignments", str(alignments), "--out", str(out)]) == 0
        outs.append({split: (out / f"bible-{split}.json").read_bytes() for split in bbs.SPLITS})
    assert outs[0] == outs[1]
    test = json.loads(outs[0]["test"])
    assert [list(r) for r in test] == [KEYS, KEYS]
    assert [(r["ref pronoun"], r["ante distance"]) for r in test] == [("his", 0), ("he", 1)]
    assert outs[0]["test"].endswith(b"]\n")


def test_a_chapter_split_in_two_runs_is_refused():
    with pytest.raises(ValueError, match="Genesis.1"):
        bbs.chapters(["Genesis.1", "Genesis.2", "Genesis.1"], ["a"] * 3, ["b"] * 3, [set()] * 3)


@pytest.mark.skipif(not (ROOT / "data/bible/test.es").exists(), reason="needs the Bible corpus (make data)")
def test_the_committed_sets_are_what_the_script_writes(tmp_path):
    assert bbs.main(["--out", str(tmp_path)]) == 0
    for split in bbs.SPLITS:
        committed = ROOT / "experiments" / "pronouns" / f"bible-{split}.json"
        assert (tmp_path / f"bible-{split}.json").read_bytes() == committed.read_bytes()
