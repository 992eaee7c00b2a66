"""The scale benchmark's corpus generator and size parser (benchmarks/scale.py); no training."""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIBLE = ROOT / "data" / "bible"


def load_scale():
    spec = importlib.util.spec_from_file_location("scale_benchmark", ROOT / "benchmarks" / "scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


scale = load_scale()


@pytest.fixture
def small_bible(tmp_path) -> Path:
    """A Bible-shaped corpus of 12 pairs in 3 chapters, with a line repeated as in the Bible."""
    base = tmp_path / "bible"
    base.mkdir()
    es = ["Y habló Jehová á Moisés, diciendo:", "En el principio crió Dios los cielos y la tierra.",
          "Y la tierra estaba desordenada y vacía.", "Y dijo Dios: Sea la luz: y fué la luz.",
          "Y habló Jehová á Moisés, diciendo:", "Y vió Dios que la luz era buena.",
          "Y apartó Dios la luz de las tinieblas.", "Y llamó Dios á la luz Día.",
          "Y habló Jehová á Moisés, diciendo:", "Amén.", "Jesús lloró.", "Y fué la tarde y la mañana un día."]
    en = ["And the LORD spake unto Moses, saying,", "In the beginning God created the heaven and the earth.",
          "And the earth was without form, and void.", "And God said, Let there be light: and there was light.",
          "And the LORD spake unto Moses, saying,", "And God saw the light, that it was good.",
          "And God divided the light from the darkness.", "And God called the light Day.",
          "And the LORD spake unto Moses, saying,", "Amen.", "Jesus wept.", "And the evening and the morning were day."]
    docs = ["Genesis.1"] * 4 + ["Exodus.6"] * 5 + ["John.11"] * 3
    for name, lines in (("train.es", es), ("train.en", en), ("train.doc", docs),
                        ("dev.es", es[:2]), ("dev.en", en[:2]), ("dev.doc", docs[:2])):
        (base / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return base


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def assert_consecutive(docs: list[str]) -> None:
    finished = set()
    for i, doc in enumerate(docs):
        if i and docs[i - 1] != doc:
            finished.add(docs[i - 1])
        assert doc not in finished, f"document {doc} continues at line {i + 1} after another"


def test_parse_count():
    assert scale.parse_count("1.2M") == 1_200_000
    assert scale.parse_count("300k") == 300_000
    assert scale.parse_count("5850000") == 5_850_000
    assert scale.parse_count("5.85M") == 5_850_000
    assert scale.parse_count("60K") == 60_000
    for bad in ("", "1.2X", "-5", "M", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            scale.parse_count(bad)
    assert scale.short_count(5_850_000) == "5.85M" and scale.short_count(60_000) == "60k"


def test_corpus_count_alignment_documents(small_bible, tmp_path):
    out = tmp_path / "out"
    record = scale.build_corpus(out, 40, seed=3, bible=small_bible, log=lambda message: None)
    es, en, doc = lines(out / "train.es"), lines(out / "train.en"), lines(out / "train.doc")
    assert len(es) == len(en) == len(doc) == 40 and not record["reused"]
    assert all(s.strip() for s in es + en)
    # repetition r of pair i is pair i's variant: its document is pair i's, suffixed #r
    base_docs = lines(small_bible / "train.doc")
    assert doc == [f"{base_docs[i % 12]}#{i // 12}" for i in range(40)]
    assert_consecutive(doc)
    assert lines(out / "dev.en") == lines(small_bible / "dev.en")
    # every line is a variant of its own pair's line: only words of that line
    base_en = lines(small_bible / "train.en")
    for i, line in enumerate(en):
        assert set(line.split()) <= set(base_en[i % 12].split())
    # every line varied (but a line of one word), and no repeats on either side (but "Amen." and
    # "Jesus wept." have too few variants for 4 repetitions: one and three)
    for side, lang in ((es, "es"), (en, "en")):
        base = lines(small_bible / f"train.{lang}")
        assert all(line != base[i % 12] for i, line in enumerate(side) if i % 12 != 9)
        long = [line for i, line in enumerate(side) if i % 12 not in (9, 10)]
        assert len(set(long)) == len(long)


def test_corpus_deterministic_and_stamped(small_bible, tmp_path):
    quiet = dict(bible=small_bible, log=lambda message: None)
    scale.build_corpus(tmp_path / "a", 30, seed=7, **quiet)
    scale.build_corpus(tmp_path / "b", 30, seed=7, **quiet)
    scale.build_corpus(tmp_path / "c", 30, seed=8, **quiet)
    for name in ("train.es", "train.en", "train.doc"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert lines(tmp_path / "a" / "train.en") != lines(tmp_path / "c" / "train.en")
    assert scale.build_corpus(tmp_path / "a", 30, seed=7, **quiet)["reused"]
    assert not scale.build_corpus(tmp_path / "a", 31, seed=7, **quiet)["reused"]  # another size: written again
    assert len(lines(tmp_path / "a" / "train.en")) == 31


@pytest.mark.skipif(not (BIBLE / "train.en").is_file(), reason="needs the built Bible corpus (data/bible)")
def test_bible_two_repetitions_repeat_no_line():
    n = len(lines(BIBLE / "train.doc"))
    stats: dict = {}
    pairs = list(scale.corpus_lines(BIBLE, 2 * n, seed=1, stats=stats))
    assert len(pairs) == 2 * n
    for side in (0, 1):
        side_lines = [p[side] for p in pairs]
        assert len(set(side_lines)) == len(side_lines)
    assert stats["repeated"] == {"src": 0, "tgt": 0}
    assert_consecutive([p[2] for p in pairs])
    assert pairs[:50] == list(scale.corpus_lines(BIBLE, 50, seed=1))
