"""The Apertium tagger's output read back onto our words, its Universal POS mapping,
and (where Debian's apertium-eng-spa is installed) real runs on both languages."""
from __future__ import annotations

import shutil

import pytest

from ctxnmt.analysis.tagger import APERTIUM_DIR, align_tags, apertium_tags, parse_stream, upos
from ctxnmt.errors import DataError

needs_apertium = pytest.mark.skipif(shutil.which("apertium-tagger") is None or not APERTIUM_DIR.is_dir(),
                                    reason="needs Debian's apertium-eng-spa (make sysdeps)")

# apertium-destxt | lt-proc -w spa-eng.automorf.bin | apertium-tagger -g -p spa-eng.prob, verbatim
STREAM = (r"^El/el<det><def><m><sg>$ ^hombre/hombre<n><m><sg>$ ^\[/\[<lpar>$ ^luz del día/luz del día<n><f><sg>$"
          r" ^del/de<pr>+el<det><def><m><sg>$ ^3/3<num>$\\ ^a/a<pr>$\^^b/*b$ \<^3/3<num>$\> «»[][" "\n"
          r"]^sin embargo/sin embargo<adv>$ ^dárselo/dar<vblex><inf>+se<prn><enc><ref><p3><mf><sp>+lo<prn>$"
          r" ^./.<sent>$^./.<sent>$[][" "\n]")


def test_upos_mapping():
    assert [upos(a) for a in ("decir<vblex><ifi><p3><sg>", "ser<vbser><prs>", "dios<n><m>", "*Jehová",
                              "de<pr>+el<det><def>", "Juan<np><ant>", "que<cnjsub>", "bla<unknowntag>")] == \
        ["VERB", "AUX", "NOUN", "X", "ADP", "PROPN", "SCONJ", "X"]


def test_parse_stream_and_align_tags():
    runs = parse_stream(STREAM)
    assert runs[:4] == [("El", "DET"), ("hombre", "NOUN"), ("[", "PUNCT"), ("luzdeldía", "NOUN")]
    assert ("\\", None) in runs and ("^", None) in runs and ("b", "X") in runs  # blanks keep their characters
    words = [["El", "hombre", "[", "luz", "del", "día", "del", "3\\", "a^b", "<3>", "«", "»"],
             ["sin", "embargo", "dárselo", "."]]
    assert align_tags(words, runs) == [
        ["DET", "NOUN", "PUNCT", "NOUN", "NOUN", "NOUN", "ADP", "NUM", "ADP", "PUNCT", "PUNCT", "PUNCT"],
        ["ADV", "ADV", "VERB", "PUNCT"]]  # the trailing "." apertium-destxt adds is ignored
    with pytest.raises(DataError, match="line 1: the tagger's text .* does not continue with the word 'Hombre'"):
        align_tags([["El", "Hombre"]], runs)
    # the tagger reads the non-empty lines only: an error names the line's number in the input
    with pytest.raises(DataError, match="line 3: the tagger's text .* does not continue with the word 'Hombre'"):
        align_tags([["El", "Hombre"]], runs, [3])


@needs_apertium
def test_apertium_tags_spanish_and_english():
    assert apertium_tags([["Y", "dijo", "Dios", ":", "Sea", "la", "luz", "."], [], ["el", "gato", "3", "."]]) == \
        [["CCONJ", "VERB", "NOUN", "PUNCT", "AUX", "DET", "NOUN", "PUNCT"], [], ["DET", "NOUN", "NUM", "PUNCT"]]
    assert apertium_tags([["The", "man", "has", "seen", "the", "dog", "."]], "en") == \
        [["DET", "NOUN", "AUX", "VERB", "DET", "NOUN", "PUNCT"]]
    # the 1909 and KJV spellings are read in modern form; an unknown capitalised word inside a sentence is a name
    assert apertium_tags([["Y", "dijo", "á", "Ezechîas", "."]]) == [["CCONJ", "VERB", "ADP", "PROPN", "PUNCT"]]
    assert apertium_tags([["And", "he", "said", "unto", "thee", "."]], "en") == \
        [["CCONJ", "PRON", "VERB", "ADP", "PRON", "PUNCT"]]


@needs_apertium
def test_gates_command_with_the_apertium_tagger(tmp_path, capsys):
    import csv

    from tests.test_cli import run, small_corpus, write_config

    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    assert run(["train", cfg, "--quiet", "--set", "training.max_updates=2", "--set", "training.valid_bleu=false",
                "--set", "model.cell=adaptive-gru"], capsys)[0] == 0
    src = tmp_path / "in.es"
    src.write_text("el gato 3 .\n\nel gato gato 11 .\n", encoding="utf-8")
    out, tags = tmp_path / "gates.csv", tmp_path / "tags.txt"
    code, stdout, _ = run(["analyze", "gates", tmp_path / "m", "-i", src, "--tagger", "apertium", "--write-tags", tags,
                           "-o", out, "--beam", "2"], capsys)
    assert code == 0
    assert tags.read_text(encoding="utf-8") == "DET NOUN NUM PUNCT\n\nDET NOUN NOUN NUM PUNCT\n"
    rows = {(r["section"], r["item"]): r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert rows[("source-tag", "NOUN")]["count"] == "3" and rows[("source-tag", "DET")]["count"] == "2"
    for key in ("gate_forward", "gate_backward"):
        assert 0.0 < float(rows[("source-tag", "NUM")][key]) < 1.0
    output_tags = [r for (section, _), r in rows.items() if section == "output-tag"]
    assert output_tags and all(0.0 < float(r["gate_decoder-gru1"]) < 1.0 for r in output_tags)
    assert "output-tag" in stdout and "gate_decoder-gru2" in stdout
