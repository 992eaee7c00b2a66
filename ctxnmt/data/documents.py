"""Documents: which earlier source sentences are a sentence's context.

A `.doc` file (or `translate --doc-ids FILE`) gives one document id per line,
aligned with the sentences; a document is a run of consecutive lines with the
same id.  The context of sentence m is the (at most) K sentences before it in
its document, oldest first.  Context is looked up by position in the split,
never by batch order, so shuffling and length bucketing cannot change it.
"""
from __future__ import annotations

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
