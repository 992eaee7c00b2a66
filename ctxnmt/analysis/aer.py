"""Alignment error rates and the gold alignment formats they are computed against.

A link is (i, j): source word i, target word j, both 0-based.  Gold alignments have
sure links S and possible links P ⊇ S (Och & Ney 2003); every metric here is summed
over the corpus before dividing, as Och & Ney and Tu et al. do:

  AER  = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|)          A: hard links
  SAER = 1 − (|M ⊙ S| + |M ⊙ P|) / (|M| + |S|)          M: soft links, M[j][i] ∈ [0, 1]

where for SAER S and P are read as 0/1 matrices, ⊙ is the element-wise product and
|·| the sum of all elements (Tu et al. 2016, "Modeling coverage for NMT").

Formats
  pharaoh   one line per sentence: "i-j" sure links, "i?j" possible links, 0-based;
            a separate file of possible links (--possible) may be given as well
  naacl     the WPT 2003 / TALP format: one link per line,
            "sentence source target [S|P] [confidence]", 1-based, the sentence
            counting from 1; a missing label means S; position 0 is NULL (no link)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ctxnmt.data.corpus import check_same_length, read_lines
from ctxnmt.errors import DataError

Link = tuple[int, int]
_PHARAOH = re.compile(r"^(\d+)([-?])(\d+)$")


@dataclass
class GoldAlignment:
    sure: set[Link] = field(default_factory=set)
    possible: set[Link] = field(default_factory=set)  # always ⊇ sure

    def add(self, link: Link, sure: bool) -> None:
        self.possible.add(link)
        if sure:
            self.sure.add(link)


# -- reading ---------------------------------------------------------------------------------

def read_pharaoh(path: str, possible_path: str | None = None) -> list[GoldAlignment]:
    gold = [_pharaoh_line(line, f"{path}:{n}") for n, line in
            enumerate(read_lines(path, allow_empty=True), 1)]
    if possible_path is not None:
        extra = read_lines(possible_path, allow_empty=True)
        check_same_length(possible_path, extra, path, gold)
        for n, (g, line) in enumerate(zip(gold, extra), 1):
            for link in _pharaoh_line(line, f"{possible_path}:{n}").possible:
                g.add(link, sure=False)
    return gold


def _pharaoh_line(line: str, where: str) -> GoldAlignment:
    gold = GoldAlignment()
    for item in line.split():
        match = _PHARAOH.match(item)
        if match is None:
            raise DataError(f"{where}: {item!r} is not a link (expected i-j for sure, i?j for possible, 0-based)")
        gold.add((int(match.group(1)), int(match.group(3))), sure=match.group(2) == "-")
    return gold


def read_naacl(path: str, sentences: int) -> list[GoldAlignment]:
    gold = [GoldAlignment() for _ in range(sentences)]
    for n, line in enumerate(read_lines(path, allow_empty=True), 1):
        fields = line.split()
        if not fields:
            continue
        if not 3 <= len(fields) <= 5:
            raise DataError(f"{path}:{n}: expected 'sentence source target [S|P] [confidence]', got {line.strip()!r}")
        try:
            sent, i, j = (int(x) for x in fields[:3])
        except ValueError:
            raise DataError(f"{path}:{n}: sentence and positions must be integers, got {line.strip()!r}") from None
        label = fields[3] if len(fields) > 3 else "S"
        if label not in ("S", "P"):
            raise DataError(f"{path}:{n}: the label must be S or P, not {label!r}")
        if len(fields) == 5:
            try:
                float(fields[4])
            except ValueError:
                raise DataError(f"{path}:{n}: the confidence must be a number, not {fields[4]!r}") from None
        if not 1 <= sent <= sentences:
            raise DataError(f"{path}:{n}: sentence {sent} is outside 1 … {sentences}")
        if i < 0 or j < 0:
            raise DataError(f"{path}:{n}: negative position in {line.strip()!r}")
        if i == 0 or j == 0:
            continue  # a link to NULL: no word pair
        gold[sent - 1].add((i - 1, j - 1), sure=label == "S")
    return gold


def check_bounds(gold: list[GoldAlignment], src_words: list[int], tgt_words: list[int], path: str) -> None:
    if len(gold) != len(src_words):
        raise DataError(f"{path}: {len(gold)} sentences but the input has {len(src_words)} lines")
    for n, (g, src, tgt) in enumerate(zip(gold, src_words, tgt_words), 1):
        for i, j in sorted(g.possible):
            if i >= src or j >= tgt:
                raise DataError(f"{path}: sentence {n}: link {i}-{j} (0-based) is outside the sentence "
                                f"({src} source words, {tgt} target words)")


# -- metrics ---------------------------------------------------------------------------------

def aer(hard: list[set[Link]], gold: list[GoldAlignment]) -> float:
    """Corpus AER of hard links against sure and possible gold links."""
    hits_s = sum(len(a & g.sure) for a, g in zip(hard, gold))
    hits_p = sum(len(a & g.possible) for a, g in zip(hard, gold))
    total = sum(len(a) for a in hard) + sum(len(g.sure) for g in gold)
    return 1.0 - (hits_s + hits_p) / total if total else 0.0


def saer(soft: list[list[list[float]]], gold: list[GoldAlignment]) -> float:
    """Corpus soft AER of M[j][i] (target word j, source word i) against the gold links."""
    hits_s = sum(m[j][i] for m, g in zip(soft, gold) for i, j in g.sure)
    hits_p = sum(m[j][i] for m, g in zip(soft, gold) for i, j in g.possible)
    total = sum(sum(map(sum, m)) for m in soft) + sum(len(g.sure) for g in gold)
    return 1.0 - (hits_s + hits_p) / total if total else 0.0


def argmax_links(soft: list[list[float]]) -> set[Link]:
    """Each target word j linked to the source word i of its largest weight (the first on ties)."""
    return {(max(range(len(row)), key=row.__getitem__), j) for j, row in enumerate(soft) if row}


def format_pharaoh(links: set[Link]) -> str:
    return " ".join(f"{i}-{j}" for i, j in sorted(links))
