"""Documents: which earlier source sentences are a sentence's context.

A `.doc` file (or `translate --doc-ids FILE`) gives one document id per line,
aligned with the sentences; a document is a run of consecutive lines with the
same id.  `translate --doc-blank-lines` takes the other common form: documents
separated by blank lines (`blank_line_documents`).  The context of sentence m is the (at most) K sentences before it in
its document, oldest first.  Context is looked up by position in the split,
never by batch order, so shuffling and length bucketing cannot change it.
"""
from __future__ import annotations

import random

import numpy as np

from ctxnmt.errors import DataError


def check_document_ids(doc_ids: list[str], name: str, n_lines: int | None = None) -> None:
    """Refuse ids that cannot describe documents: a wrong line count, or the first problem
    DocumentRuns finds."""
    if n_lines is not None and len(doc_ids) != n_lines:
        raise DataError(f"{name}: {len(doc_ids)} document ids for {n_lines} input lines")
    problem = document_runs(doc_ids)[1]
    if problem:
        raise DataError(f"{name}:{problem}")


def document_runs(doc_ids) -> tuple[np.ndarray, str]:
    """Each line's document number (a new one wherever the id changes), and the first reason the
    ids cannot describe documents ("" if they can)."""
    runs = DocumentRuns()
    return runs.number(doc_ids), runs.problem


class DocumentRuns:
    """Numbers documents block by block as a corpus streams past, and finds the first line whose
    id cannot describe a document: an empty id, or a document whose lines are not consecutive
    (its id reappearing after another's); the problem starts with the line number."""

    def __init__(self):
        self.problem = ""
        self._first_line: dict[str, int] = {}
        self._last: str | None = None
        self._number, self._lines = -1, 0

    def number(self, docs) -> np.ndarray:
        out = np.empty(len(docs), dtype=np.int32)
        for row, doc in enumerate(docs):
            self._lines += 1
            if doc != self._last:
                if not self.problem and doc.strip() and doc in self._first_line:
                    self.problem = (f"{self._lines}: document '{doc}' (first at line {self._first_line[doc]}) "
                                    "continues after another document; a document's lines must be consecutive")
                self._first_line.setdefault(doc, self._lines)
                self._last, self._number = doc, self._number + 1
            if not self.problem and not doc.strip():
                self.problem = f"{self._lines}: empty document id"
            out[row] = self._number
        return out


def previous_sentences(doc_ids: list[str], k: int, usable: list[bool] | None = None) -> list[list[int]]:
    """For each position, the positions of its at most `k` previous sentences in the same
    document, oldest first.  Positions with `usable` False (empty lines) are never context."""
    context: list[list[int]] = []
    window: list[int] = []
    for i, doc in enumerate(doc_ids):
        if i == 0 or doc != doc_ids[i - 1]:
            window = []
        context.append(window[-k:] if k else [])
        if usable is None or usable[i]:
            window = (window + [i])[-k:]
    return context


class PreviousSentences:
    """`previous_sentences` of a whole training split, computed for a batch's rows when it is
    built, from each sentence's document number (ctxnmt.data.indexed): nothing per sentence is
    kept, whatever the corpus size."""

    def __init__(self, docs: np.ndarray, k: int):
        self.docs, self.k = docs, k

    def positions(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(B, k) context positions, oldest first in slots 0 … count − 1, and (B,) counts."""
        window = rows[:, None] - np.arange(self.k, 0, -1)
        same = (window >= 0) & (self.docs[np.maximum(window, 0)] == self.docs[rows][:, None])
        count = same.sum(1)  # a document's lines are consecutive: the same-document slots end the window
        slots = np.arange(self.k)
        return np.where(slots < count[:, None], rows[:, None] - count[:, None] + slots, 0), count


class ListedContext:
    """Context given as a list of position lists per sentence (its last k count)."""

    def __init__(self, lists: list[list[int]], k: int = 0):
        self.k = k or max([1] + [len(c) for c in lists])
        self.table = np.zeros((len(lists), self.k), dtype=np.int64)
        self.counts = np.zeros(len(lists), dtype=np.int64)
        for i, c in enumerate(lists):
            c = c[-self.k:]
            self.table[i, :len(c)] = c
            self.counts[i] = len(c)

    def positions(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.table[rows], self.counts[rows]


class RandomContextSize:
    """Context dropout in the form Fernandes et al. (2021) train with: each sentence reads
    min(n, what its document gives) of its previous sentences, the most recent ones, with n
    drawn uniformly from 0 … K anew at every update.  A model trained so has read an empty
    context (about one sentence in K + 1), so "none" at test time is in its distribution.

    A draw is a hash of (seed, update, sentence), not a generator's state: a resumed run
    draws exactly what the uninterrupted one did, and nothing is kept per sentence."""

    def __init__(self, inner, k: int, seed: int, update: int = 0):
        self.inner, self.k, self.seed, self.update = inner, k, seed, update

    def at(self, update: int) -> RandomContextSize:
        return RandomContextSize(self.inner, self.k, self.seed, update)

    def sizes(self, rows: np.ndarray) -> np.ndarray:
        """n for each row, uniform over 0 … K: splitmix64 of the (seed, update, row) triple."""
        with np.errstate(over="ignore"):
            x = (np.asarray(rows, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
                 + np.uint64(self.update) * np.uint64(0xBF58476D1CE4E5B9) + np.uint64(self.seed))
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            x ^= x >> np.uint64(31)
        return (x % np.uint64(self.k + 1)).astype(np.int64)

    def positions(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        positions, count = self.inner.positions(rows)
        kept = np.minimum(count, self.sizes(rows))
        # slots 0 … count − 1 hold the sentences oldest first: keep the last `kept`
        slots = np.arange(positions.shape[1])[None, :] + (count - kept)[:, None]
        moved = np.take_along_axis(positions, np.minimum(slots, positions.shape[1] - 1), axis=1)
        return np.where(np.arange(positions.shape[1]) < kept[:, None], moved, 0), kept


def other_document_sentences(doc_ids: list[str], k: int, seed: int) -> list[list[int]]:
    """A control for `previous_sentences`: each position gets as many context positions as
    its own document gives it (up to `k`), but from a consecutive run of one other document
    chosen with `seed`.  The amount of context stays; what it says about the sentence goes."""
    documents: dict[str, list[int]] = {}
    for i, doc in enumerate(doc_ids):
        documents.setdefault(doc, []).append(i)
    # donors[n]: the documents long enough to lend n sentences, and where each sits in that list
    donors = [[d for d, members in documents.items() if len(members) >= n] for n in range(k + 1)]
    where = [{d: at for at, d in enumerate(names)} for names in donors]
    rng = random.Random(seed)
    lent: list[list[int]] = []
    for i, own in enumerate(previous_sentences(doc_ids, k)):
        n, doc = len(own), doc_ids[i]
        if not n:
            lent.append([])
            continue
        own_at = where[n].get(doc)
        choices = len(donors[n]) - (own_at is not None)
        if choices < 1:
            raise DataError(f"line {i + 1}: no other document has the {n} sentences its context needs")
        pick = rng.randrange(choices)  # the same draw as rng.choice over the donors without `doc`
        members = documents[donors[n][pick + (own_at is not None and pick >= own_at)]]
        start = rng.randrange(len(members) - n + 1)
        lent.append(members[start:start + n])
    return lent


def blank_line_documents(lines: list[str]) -> list[str]:
    """Document ids for text whose documents are separated by blank lines: each run of
    non-blank lines is one document.  A blank line keeps the id of the line before it (it
    is translated as empty and is nobody's context)."""
    ids: list[str] = []
    number, seen_text, after_blank = 1, False, False
    for line in lines:
        if not line.strip():
            after_blank = True
        else:
            if seen_text and after_blank:
                number += 1
            seen_text, after_blank = True, False
        ids.append(f"doc{number}")
    return ids
