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

from ctxnmt.errors import DataError


def check_document_ids(doc_ids: list[str], name: str, n_lines: int | None = None) -> None:
    """Refuse ids that cannot describe documents: a wrong line count, an empty id, or a
    document whose lines are not consecutive (its id reappearing after another's)."""
    if n_lines is not None and len(doc_ids) != n_lines:
        raise DataError(f"{name}: {len(doc_ids)} document ids for {n_lines} input lines")
    first_line: dict[str, int] = {}
    for number, doc in enumerate(doc_ids, start=1):
        if not doc.strip():
            raise DataError(f"{name}:{number}: empty document id")
        if doc in first_line and doc_ids[number - 2] != doc:
            raise DataError(f"{name}:{number}: document '{doc}' (first at line {first_line[doc]}) continues "
                            "after another document; a document's lines must be consecutive")
        first_line.setdefault(doc, number)


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
