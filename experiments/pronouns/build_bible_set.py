"""Build the Spanish→English contrastive pronoun sets of the Bible's dev and test chapters (issue 53).

Spanish "su padre" and "dijo" leave the possessor's and the subject's gender and number
open where English must pick his/her/their/its or he/she/they.  Each English pronoun whose
Spanish counterpart (found through the committed silver word alignment) leaves that choice
open becomes one example: the reference line, and the same line with only that pronoun swapped
for each other member of its class.  The rules are in experiments/pronouns/README.md.

Run from the repository root:

    .venv/bin/python experiments/pronouns/build_bible_set.py            # writes bible-{dev,test}.json
    .venv/bin/python experiments/pronouns/build_bible_set.py --counts   # and prints the count tables
    .venv/bin/python experiments/pronouns/build_bible_set.py --sample 100 --seed 1

It reads the corpus that `make data` builds and the committed silver alignments (eflomal is
unseeded, so those files, not a rerun of the aligner, are the input of record); nothing in it
is random apart from --sample's seeded draw, so two runs write the same bytes.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ctxnmt.data.corpus import read_lines
from ctxnmt.data.preprocess import moses_words

ROOT = Path(__file__).resolve().parents[2]
SPLITS = ("dev", "test")
MAX_DISTANCE = 3  # context verses searched for an antecedent, as many as the examples carry

CLASSES = {"possessive": ("his", "her", "their", "its"),
           "subject": ("he", "she", "they"),
           "object": ("him", "her", "them")}
CANDIDATES = frozenset(p for members in CLASSES.values() for p in members)

POSSESSIVE_SOURCES = frozenset({"su", "sus"})
DATIVE_SOURCES = frozenset({"le", "les"})
# Spanish words that make the subject's gender or number explicit (or show that the English
# pronoun is not a plain omitted subject).  RV1909 drops the accent on capitals, so "El" is also
# "Él"; the article "el"/"la"/"los"/"las" heads "el que", "los cuales" ("he that", "they which").
EXPLICIT_SOURCES = frozenset("""
    él el ella ellos ellas ello usted ustedes vos vosotros vosotras nosotros nosotras yo tú
    le les lo la los las se me te nos os mí ti sí consigo conmigo contigo
    éste ésta éstos éstas ése ésa ésos ésas aquél aquélla aquéllos aquéllas
    este esta estos estas ese esa esos esas aquel aquella aquellos aquellas
    cual cuales quien quienes al del uno una unos unas
""".split())
SUBJECT_PRONOUNS = {"he": {"él"}, "she": {"ella"}, "they": {"ellos", "ellas"}}
PREPOSITIONS = frozenset("""
    á a de con en por para sin contra sobre ante entre tras hacia desde hasta según del al
""".split())
# "he that believeth", "they which pass by": a generic relative head, not a referring pronoun;
# "an he goat", "she asses": a sex marking a noun, not a pronoun at all
NOT_REFERRING_BEFORE = frozenset("""
    that which who whom whose goat goats ass asses lamb lambs bear bears camel camels
""".split())
SENTENCE_ENDS = frozenset({".", "?", "!"})

# Antecedent words (English, matched lowercased).  People only: KJV's his/her for things
# (a tree's "his fruit", a city's "her suburbs") have no antecedent in these lists.
MASCULINE = frozenset("""
    man king son father brother servant lord god prophet priest husband prince master boy lad
    bridegroom uncle captain ruler governor judge shepherd angel centurion levite
    neighbour enemy adversary friend stranger fool sinner
""".split())
# KJV's male beasts take he/his too, but modern English would say "its" of them (see keep_its)
MALE_BEASTS = frozenset("ram goat bullock ox lion".split())
FEMININE = frozenset("""
    woman wife daughter mother sister maid maiden damsel widow queen harlot whore handmaid
    virgin bride mistress nurse lady concubine prophetess
""".split())
# KJV makes a city, a land and the earth "she" ("Hebron with her suburbs"); modern English says "its"
FEMININE_PLACES = frozenset({"city", "land", "earth"})
PLURAL = frozenset("""
    men women children people sons daughters brethren brothers sisters fathers mothers priests
    levites servants kings princes elders prophets disciples nations heathen enemies multitude
    multitudes congregation families tribes captains rulers chiefs officers scribes angels
    apostles gentiles jews magicians wives husbands horsemen soldiers shepherds inhabitants
    strangers saints messengers israelites generation remnant
""".split())
FEMALE_NAMES = frozenset("""
    Eve Sarah Sarai Hagar Rebekah Rachel Leah Dinah Tamar Zilpah Bilhah Miriam Zipporah Rahab
    Deborah Jael Delilah Naomi Ruth Orpah Hannah Peninnah Michal Abigail Bathsheba Abishag
    Jezebel Athaliah Huldah Vashti Esther Mary Martha Elisabeth Anna Salome Dorcas Tabitha Lydia
    Priscilla Sapphira Rhoda Phebe Eunice Lois Herodias Candace Jochebed Milcah Adah Zillah
    Keturah Basemath Mahalath Judith Asenath Shiphrah Puah
""".split())
DIVINE_TITLES = frozenset({"LORD", "Lord", "GOD", "God"})
# how the training text uses a name: as a place ("in Egypt", "the king of Babylon") or as a
# person ("Moses said", "the son of Jesse", "Joshua the son of Nun")
PLACE_BEFORE = frozenset({"in", "into", "at", "toward", "towards", "mount"})
PLACE_OF = frozenset("""
    land city cities wilderness king kings mount plain plains river border borders coast coasts
    gate gates walls inhabitants princes country
""".split())
PERSON_OF = frozenset({"son", "sons", "daughter", "wife", "father", "brother"})
PERSON_VERBS = frozenset({"said", "saith", "spake", "answered", "went", "came", "took", "begat", "sent", "called"})
NOT_PLACES = frozenset({"Christ"})  # Paul's "in Christ" is no place
WORD = re.compile(r"\w[\w-]*|[^\w\s]")
# capitalised words that never name an antecedent: vocatives, liturgical words, the pronoun "I"
NAME_STOP = frozenset({"O", "I", "Amen", "Selah", "Alleluia", "Hallelujah"})
# endings of a capitalised plural that names a people: Levites, Philistines, Egyptians, Anakims
PEOPLE_ENDINGS = ("ites", "ines", "ans", "ims", "ees", "Jews", "Greeks")


@dataclass
class Example:
    """One contrastive example; `record()` is what the JSON file holds."""

    doc: str
    segment: int
    line: int
    source: str
    context: list[str]
    ref: str
    src_pronoun: str
    ref_pronoun: str
    klass: str
    distance: int | None
    errors: list[dict]
    position: int  # the pronoun's token index in the English line: sort key, and marks it in --sample
    en_context: list[str]

    def record(self) -> dict:
        return {"document id": self.doc, "segment id": self.segment, "line": self.line,
                "source": self.source, "context": self.context, "ref segment": self.ref,
                "src pronoun": self.src_pronoun, "ref pronoun": self.ref_pronoun, "class": self.klass,
                "ante distance": self.distance,
                "intrasegmental": None if self.distance is None else self.distance == 0,
                "errors": self.errors}


# -- the Spanish counterpart: which class, if any ----------------------------------------------

def classify(pronoun: str, next_word: str, aligned: list[str]) -> tuple[str, str] | None:
    """(class, Spanish pronoun) of an English pronoun given its aligned Spanish words, or None to skip."""
    lowered = [w.lower() for w in aligned]
    if pronoun in CLASSES["possessive"]:
        found = [w for w in lowered if w in POSSESSIVE_SOURCES]
        if found:
            return "possessive", found[0]
    if pronoun in CLASSES["object"]:
        found = [w for w in lowered if w in DATIVE_SOURCES]
        if found and not any(w in EXPLICIT_SOURCES - DATIVE_SOURCES for w in lowered):
            return "object", found[0]
    if pronoun in CLASSES["subject"] and next_word.lower() not in NOT_REFERRING_BEFORE:
        # a capital left by aligned_words is a name ("Moisés"): an explicit subject
        if not any(w in EXPLICIT_SOURCES for w in lowered) and not any(w[:1].isupper() for w in aligned):
            return "subject", ""
    return None


def unlinked_subject(pronoun: str, es_words: list[str], links: set[tuple[int, int]]) -> bool:
    """Whether the Spanish verse has a subject pronoun of the English one's gender and number that
    the aligner left unlinked ("repartió él los niños"): then the subject may well be explicit.
    One after a preposition ("de él", "con ellos") is an object, not a subject."""
    linked = {i for i, _ in links}
    return any(i not in linked and w.lower() in SUBJECT_PRONOUNS[pronoun]
               and (i == 0 or es_words[i - 1].lower() not in PREPOSITIONS)
               for i, w in enumerate(es_words))


def aligned_words(links: set[tuple[int, int]], es_words: list[str], j: int) -> list[str]:
    """The Spanish words linked to English word j, capitalised only where they are names.

    A capital at the start of the line or of a sentence is lowered, so that only a
    mid-sentence capital (a name: "Moisés", "Dios") counts as an explicit subject."""
    out = []
    for i in sorted(i for i, jj in links if jj == j):
        word = es_words[i]
        out.append(word.lower() if i == 0 or es_words[i - 1] in SENTENCE_ENDS | {"¿", "¡", ":"} else word)
    return out


# -- the contrastive lines ---------------------------------------------------------------------

def token_spans(raw: str, words: list[str]) -> list[tuple[int, int]]:
    """Character span of each tokeniser word in the raw line (the tokeniser only splits, in order)."""
    spans, at = [], 0
    for word in words:
        start = raw.find(word, at)
        if start < 0:
            raise ValueError(f"token {word!r} not found in order in {raw!r}")
        spans.append((start, start + len(word)))
        at = start + len(word)
    return spans


def cased_like(word: str, model: str) -> str:
    if len(model) > 1 and model.isupper():
        return word.upper()
    return word.capitalize() if model[:1].isupper() else word


def contrastives(raw: str, span: tuple[int, int], klass: str, pronoun: str, keep_its: bool) -> list[dict]:
    """The raw line with the pronoun at `span` swapped for each other member of its class."""
    original = raw[span[0]:span[1]]
    out = []
    for other in CLASSES[klass]:
        if other == pronoun or (other == "its" and not keep_its):
            continue
        out.append({"contrastive": raw[:span[0]] + cased_like(other, original) + raw[span[1]:],
                    "replacement": other})
    return out


# -- the antecedent tag ------------------------------------------------------------------------

@dataclass(frozen=True)
class Lexicon:
    """What the English training side tells about words: those it writes in lower case (any
    other capitalised word is a name) and the names it mostly uses as places."""

    lowercase: frozenset[str]
    places: frozenset[str]
    people: frozenset[str]  # names with at least one person-like use

    def is_name(self, word: str) -> bool:
        return (word[:1].isupper() and word not in NAME_STOP and word.replace("-", "").isalpha()
                and word.lower() not in self.lowercase)

    def is_place(self, word: str) -> bool:
        return word in self.places and self.is_name(word)

    def may_be_place(self, word: str) -> bool:
        """A place, or a name too rare to tell (most of Joshua's towns): KJV's "her" may mean it."""
        return self.is_name(word) and (word in self.places or word not in self.people)


def read_lexicon(path: Path) -> Lexicon:
    """Names are capitalised words never seen in lower case; a name is a place when more of its
    uses look like a place's ("in Egypt", "the land of Canaan") than a person's ("Moses said")."""
    verses = [WORD.findall(line) for line in read_lines(path)]
    lowercase = frozenset(w for v in verses for w in v if w[:1].islower())
    place, person = Counter(), Counter()
    for v in verses:
        for i, w in enumerate(v):
            if w[:1].isupper() and w.lower() not in lowercase:
                place[w] += _place_use(v, i)
                person[w] += _person_use(v, i)
    places = {w for w in place if place[w] >= 2 and place[w] > person[w]} - NOT_PLACES
    return Lexicon(lowercase, frozenset(places), frozenset(w for w in person if person[w]))


def _place_use(v: list[str], i: int) -> bool:
    before = v[i - 1] if i > 0 else ""
    return before in PLACE_BEFORE or (before == "of" and i > 1 and v[i - 2] in PLACE_OF)


def _person_use(v: list[str], i: int) -> bool:
    after = v[i + 1:i + 3]
    of = i > 1 and v[i - 1] == "of" and v[i - 2] in PERSON_OF
    return of or bool(after and after[0] in PERSON_VERBS) or after == ["the", "son"]


def agrees(pronoun: str, words: list[str], k: int, lex: Lexicon) -> bool:
    """Whether words[k] could be the antecedent of `pronoun` (gender and number)."""
    word, lower = words[k], words[k].lower()
    if _not_referred_to(words, k):
        return False
    name, place = lex.is_name(word), lex.is_place(word)
    if pronoun in ("he", "him", "his"):
        return (lower in MASCULINE | MALE_BEASTS
                or (name and not place and word not in FEMALE_NAMES and not word.endswith(PEOPLE_ENDINGS)))
    if pronoun in ("she", "her"):
        return lower in FEMININE | FEMININE_PLACES or word in FEMALE_NAMES or lex.may_be_place(word)
    if pronoun in ("they", "them", "their"):
        return (lower in PLURAL or place or (name and word.endswith(PEOPLE_ENDINGS))
                or _pair(words, k, lex))
    return False  # "its": KJV dev/test never has it; a thing's possessor is not looked for


def _not_referred_to(words: list[str], k: int) -> bool:
    """The addressee of "O LORD", "O son of man", and the speaker of "saith the Lord GOD": the text
    speaks to or for them, so a third-person pronoun nearby means someone else."""
    if k > 0 and words[k - 1] == "O":
        return True
    i = k - 1
    while i >= 0 and words[i] in DIVINE_TITLES:
        i -= 1
    return words[k] in DIVINE_TITLES and i >= 1 and words[i] == "the" and words[i - 1] == "saith"


def _pair(words: list[str], k: int, lex: Lexicon) -> bool:
    """The second of two people joined by "and" ("Moses and Aaron") is a plural antecedent."""
    def person(i: int) -> bool:
        return words[i].lower() in MASCULINE | FEMININE or (lex.is_name(words[i]) and not lex.is_place(words[i]))
    return k >= 2 and words[k - 1] == "and" and person(k) and person(k - 2)


def is_person(word: str, lex: Lexicon) -> bool:
    """Whether an antecedent found by `agrees` is surely a person (not a beast, a land, a city or
    a name too rare to tell)."""
    return word.lower() not in MALE_BEASTS | FEMININE_PLACES and not lex.may_be_place(word)


def antecedent(pronoun: str, verses: list[list[str]], k: int, j: int, lex: Lexicon) -> tuple[int | None, list[str]]:
    """(distance, the agreeing words there): 0 when some precede token j of verse k, else the
    nearest of the 3 earlier verses that has one; (None, []) when none has."""
    for d in range(MAX_DISTANCE + 1):
        if k - d < 0:
            break
        words = verses[k - d]
        found = [words[i] for i in range(j if d == 0 else len(words)) if agrees(pronoun, words, i, lex)]
        if found:
            return d, found
    return None, []


# -- a chapter and a split ---------------------------------------------------------------------

@dataclass
class Chapter:
    doc: str
    first_line: int  # 1-based line of its first verse in the split's files
    es: list[str]
    en: list[str]
    links: list[set[tuple[int, int]]]


def chapter_examples(ch: Chapter, lex: Lexicon) -> list[Example]:
    es_words, en_words = moses_words(ch.es, "es"), moses_words(ch.en, "en")
    examples = []
    for k, (es, en) in enumerate(zip(es_words, en_words)):
        spans = token_spans(ch.en[k], en)
        for j, word in enumerate(en):
            if word.lower() in CANDIDATES:
                example = _example(ch, k, j, es, en, spans[j], en_words, lex)
                if example is not None:
                    examples.append(example)
    return examples


def _example(ch: Chapter, k: int, j: int, es: list[str], en: list[str], span: tuple[int, int],
             en_words: list[list[str]], lex: Lexicon) -> Example | None:
    pronoun = en[j].lower()
    kind = classify(pronoun, en[j + 1] if j + 1 < len(en) else "", aligned_words(ch.links[k], es, j))
    if kind is None or (kind[0] == "subject" and unlinked_subject(pronoun, es, ch.links[k])):
        return None
    klass, src = kind
    distance, found = antecedent(pronoun, en_words, k, j, lex)
    # KJV's his/her often stands for modern "its" (a tree's "his fruit", a city's "her suburbs",
    # the ram's "his horns"): "its" is offered as a wrong choice only after a person antecedent.
    keep_its = any(is_person(w, lex) for w in found)
    errors = contrastives(ch.en[k], span, klass, pronoun, keep_its)
    first = max(0, k - MAX_DISTANCE)
    return Example(doc=ch.doc, segment=k + 1, line=ch.first_line + k, source=ch.es[k], context=ch.es[first:k],
                   ref=ch.en[k], src_pronoun=src, ref_pronoun=pronoun, klass=klass, distance=distance,
                   errors=errors, position=j, en_context=ch.en[first:k])


def chapters(docs: list[str], es: list[str], en: list[str], links: list[set]) -> list[Chapter]:
    """The split's chapters in file order; a chapter's lines must be consecutive."""
    out: list[Chapter] = []
    for n, doc in enumerate(docs):
        if out and out[-1].doc == doc:
            continue
        if any(c.doc == doc for c in out):
            raise ValueError(f"chapter {doc} is not one run of consecutive lines (again at line {n + 1})")
        end = n
        while end < len(docs) and docs[end] == doc:
            end += 1
        out.append(Chapter(doc, n + 1, es[n:end], en[n:end], links[n:end]))
    return out


def read_alignment(path: Path, lines: int) -> list[set[tuple[int, int]]]:
    rows = path.read_text(encoding="utf-8").split("\n")
    if rows[-1] == "":
        rows.pop()
    if len(rows) != lines:
        raise ValueError(f"{path} has {len(rows)} lines, the split has {lines}")
    return [{(int(a), int(b)) for a, b in (link.split("-") for link in row.split())} for row in rows]


def build_split(split: str, data: Path, alignments: Path, lex: Lexicon) -> list[Example]:
    es, en, docs = (read_lines(data / f"{split}.{ext}") for ext in ("es", "en", "doc"))
    if not len(es) == len(en) == len(docs):
        raise ValueError(f"{data}/{split}.{{es,en,doc}} differ in length")
    links = read_alignment(alignments / f"bible-{split}.silver.es-en.txt", len(es))
    examples = [e for ch in chapters(docs, es, en, links) for e in chapter_examples(ch, lex)]
    return sorted(examples, key=lambda e: (e.line, e.position))


def write_set(examples: list[Example], path: Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump([e.record() for e in examples], fh, ensure_ascii=False, indent=1)
        fh.write("\n")


# -- reports -----------------------------------------------------------------------------------

TAGS = (("same verse", lambda d: d == 0), ("earlier verses", lambda d: d is not None and d > 0),
        ("none", lambda d: d is None))


def counts_tables(sets: dict[str, list[Example]]) -> str:
    """Markdown: examples per split × class × pronoun, and per antecedent tag."""
    rows = ["| class | pronoun | " + " | ".join(sets) + " |", "|---|---|" + "---:|" * len(sets)]
    for klass, members in CLASSES.items():
        for pronoun in members:
            n = [sum(e.klass == klass and e.ref_pronoun == pronoun for e in s) for s in sets.values()]
            rows.append(f"| {klass} | {pronoun} | " + " | ".join(map(str, n)) + " |")
    rows.append("| **all** | | " + " | ".join(str(len(s)) for s in sets.values()) + " |")
    rows += ["", "| antecedent tag | " + " | ".join(sets) + " |", "|---|" + "---:|" * len(sets)]
    for name, test in TAGS:
        rows.append(f"| {name} | " + " | ".join(str(sum(test(e.distance) for e in s)) for s in sets.values()) + " |")
    distances = Counter(e.distance for s in sets.values() for e in s if e.distance)
    rows += ["", "earlier-verse distances (both splits): "
             + ", ".join(f"{d}: {distances[d]}" for d in range(1, MAX_DISTANCE + 1))]
    return "\n".join(rows) + "\n"


def show(e: Example, n: int) -> str:
    words = moses_words([e.ref], "en")[0]
    marked = " ".join(f"[[{w}]]" if i == e.position else w for i, w in enumerate(words))
    lines = [f"#{n}  {e.doc}:{e.segment} (line {e.line})  {e.klass} {e.ref_pronoun} <- "
             f"{e.src_pronoun or '(omitted)'}  tag: {'none' if e.distance is None else e.distance}"]
    lines += [f"   ctx-{len(e.en_context) - i}: {c}" for i, c in enumerate(e.en_context)]
    lines += [f"   EN: {marked}", f"   ES: {e.source}"]
    lines.append("   wrong: " + ", ".join(x["replacement"] for x in e.errors))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Build experiments/pronouns/bible-{dev,test}.json.")
    p.add_argument("--data", type=Path, default=ROOT / "data/bible", help="the corpus (make data)")
    p.add_argument("--alignments", type=Path, default=ROOT / "experiments/results/alignment")
    p.add_argument("--out", type=Path, default=ROOT / "experiments/pronouns")
    p.add_argument("--counts", action="store_true", help="print the count tables (markdown)")
    p.add_argument("--sample", type=int, metavar="N", help="print N seeded random examples for reading")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sample-split", choices=SPLITS, default="test")
    args = p.parse_args(argv)
    lex = read_lexicon(args.data / "train.en")
    sets = {split: build_split(split, args.data, args.alignments, lex) for split in SPLITS}
    for split, examples in sets.items():
        write_set(examples, args.out / f"bible-{split}.json")
    if args.counts:
        sys.stdout.write(counts_tables(sets))
    if args.sample:
        pool = sets[args.sample_split]
        picked = random.Random(args.seed).sample(range(len(pool)), min(args.sample, len(pool)))
        sys.stdout.write("\n".join(show(pool[i], n) for n, i in enumerate(sorted(picked), 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
