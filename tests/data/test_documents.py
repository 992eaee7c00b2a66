"""Document ids: which sentences are a sentence's context, and bad id files."""
from __future__ import annotations

import pytest

from ctxnmt.data.batching import make_batch
from ctxnmt.data.documents import check_document_ids, previous_sentences
from ctxnmt.errors import DataError

DOCS = ["a", "a", "a", "a", "a", "b", "c", "c"]


def test_context_is_the_previous_sentences_of_the_same_document_only():
    assert previous_sentences(DOCS, 3) == [[], [0], [0, 1], [0, 1, 2], [1, 2, 3], [], [], [6]]
    assert previous_sentences(DOCS, 1) == [[], [0], [1], [2], [3], [], [], [6]]


def test_a_repeated_id_after_another_document_starts_no_context_across_the_boundary():
    assert previous_sentences(["a", "b", "a"], 3) == [[], [], []]


def test_unusable_lines_are_never_context():
    usable = [True, False, True, True, True, True, True, True]
    assert previous_sentences(DOCS, 2, usable)[:5] == [[], [0], [0], [0, 2], [2, 3]]


def test_batch_context_is_looked_up_by_dataset_position():
    src = [[10 + i] * (i + 1) for i in range(len(DOCS))]
    tgt = [[5, 2]] * len(DOCS)
    context = previous_sentences(DOCS, 3)
    batch = make_batch([7, 4, 0], src, tgt, context, 3)
    assert batch.context.ids.shape == (3, 3, 7)
    assert batch.context.ids[0, 0].tolist() == [16] * 7 and float(batch.context.mask[0, 1:].sum()) == 0
    assert [row[0].item() for row in batch.context.ids[1]] == [11, 12, 13]  # sentences 1, 2, 3: oldest first
    assert float(batch.context.mask[2].sum()) == 0  # first sentence of its document


@pytest.mark.parametrize("ids, n, message", [
    (["a", "a"], 3, r"^ids\.doc: 2 document ids for 3 input lines$"),
    (["a", "", "b"], 3, r"^ids\.doc:2: empty document id$"),
    (["a", "b", "a"], 3, r"^ids\.doc:3: document 'a' \(first at line 1\) continues after another document"),
])
def test_bad_document_ids_are_one_line_errors(ids, n, message):
    with pytest.raises(DataError, match=message):
        check_document_ids(ids, "ids.doc", n)
