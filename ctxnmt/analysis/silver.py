"""Silver word alignments: eflomal (Östling & Tiedemann 2016) in both directions,
symmetrised with grow-diag-final (Koehn et al. 2003).

There is no hand-made Spanish–English Bible alignment offline, so `analyze alignment
--silver` measures attention against this automatic one instead.  It is *silver*:
an unsupervised aligner's output, good enough to rank models against each other,
not a human gold standard, and every output that uses it says so.

eflomal is unsupervised and has no separate apply step, so the sentences to align
are appended to the training corpus and aligned together with it; only their links
are kept.  Words are lowercased for the aligner.  eflomal's sampler takes no seed:
two runs give slightly different links (keep the file that was used).
"""
from __future__ import annotations

import os
import tempfile

from ctxnmt.analysis.aer import Link
from ctxnmt.errors import DataError

NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))
SILVER_LABEL = "SILVER (eflomal + grow-diag-final, not a human alignment)"


def grow_diag_final(forward: set[Link], reverse: set[Link]) -> set[Link]:
    """Koehn's grow-diag-final of two directional alignments given as (source, target) links.

    Start from the intersection; repeatedly add union links next to (diagonals included)
    an accepted link when their source or target word is still unaligned; finally add
    any directional link whose source or target word is still unaligned."""
    union = forward | reverse
    links = forward & reverse
    aligned_src = {i for i, _ in links}
    aligned_tgt = {j for _, j in links}

    def accept(link: Link) -> None:
        links.add(link)
        aligned_src.add(link[0])
        aligned_tgt.add(link[1])

    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in NEIGHBOURS:
                new = (i + di, j + dj)
                if new in union and new not in links and (new[0] not in aligned_src or new[1] not in aligned_tgt):
                    accept(new)
                    grown = True
    for directional in (forward, reverse):
        for link in sorted(directional):
            if link not in links and (link[0] not in aligned_src or link[1] not in aligned_tgt):
                accept(link)
    return links


def read_links(path: str, lines: int) -> list[set[Link]]:
    with open(path, encoding="utf-8") as fh:
        rows = fh.read().split("\n")[:lines]
    if len(rows) != lines:
        raise DataError(f"eflomal wrote {len(rows)} alignment lines for {lines} sentences")
    return [{(int(a), int(b)) for a, b in (item.split("-") for item in row.split())} for row in rows]


def eflomal_links(src: list[list[str]], tgt: list[list[str]], samplers: int = 2) -> tuple[list, list]:
    """(forward, reverse) links of every sentence pair, both as (source, target)."""
    from eflomal import Aligner  # an optional heavy dependency: only silver alignments need it

    if any(not s or not t for s, t in zip(src, tgt)):
        raise DataError("eflomal needs a word on both sides of every sentence pair")
    with tempfile.TemporaryDirectory(prefix="ctxnmt-eflomal-") as tmp:
        fwd, rev = os.path.join(tmp, "fwd"), os.path.join(tmp, "rev")
        Aligner(n_samplers=samplers).align([" ".join(w).lower() for w in src], [" ".join(w).lower() for w in tgt],
                                           links_filename_fwd=fwd, links_filename_rev=rev, quiet=True)
        return read_links(fwd, len(src)), read_links(rev, len(src))


def silver_alignment(train_src: list[list[str]], train_tgt: list[list[str]], src: list[list[str]],
                     tgt: list[list[str]], samplers: int = 2) -> list[set[Link]]:
    """grow-diag-final links of (src, tgt), aligned together with the training corpus."""
    forward, reverse = eflomal_links(train_src + src, train_tgt + tgt, samplers)
    skip = len(train_src)
    return [grow_diag_final(f, r) for f, r in zip(forward[skip:], reverse[skip:])]
