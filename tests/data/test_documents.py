"""Document ids: which sentences are a sentence's context, and bad id files."""
from __future__ import annotations

import pytest

from ctxnmt.data.batching import make_batch
from ctxnmt.data.documents import check_document_ids, other_document_sentences, previous_sentences
from ctxnmt.data.indexed import Side
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
    src = Side.from_lists([[10 + i] * (i + 1) for i in range(len(DOCS))])
    tgt = Side.from_lists([[5, 2]] * len(DOCS))
    context = previous_sentences(DOCS, 3)
    batch = make_batch([7, 4, 0], src, tgt, context, 3)
    assert batch.context.ids.shape == (3, 3, 7)
    assert batch.context.ids[0, 0].tolist() == [16] * 7 and float(batch.context.mask[0, 1:].sum()) == 0
    assert [row[0].item() for row in batch.context.ids[1]] == [11, 12, 13]  # sentences 1, 2, 3: oldest first
    assert float(batch.context.mask[2].sum()) == 0  # first sentence of its document


def test_other_document_context_keeps_the_amount_and_changes_whose_it_is():
    docs = ["a"] * 5 + ["b"] * 2 + ["c"] * 4
    own = previous_sentences(docs, 3)
    lent = other_document_sentences(docs, 3, seed=5)
    assert [len(c) for c in lent] == [len(c) for c in own]
    for i, context in enumerate(lent):
        if context:
            assert len({docs[j] for j in context}) == 1 and docs[context[0]] != docs[i]
            assert context == list(range(context[0], context[0] + len(context)))  # a consecutive run
    assert other_document_sentences(docs, 3, seed=5) == lent != other_document_sentences(docs, 3, seed=6)


def test_a_context_no_other_document_can_lend_is_a_clear_error():
    with pytest.raises(DataError, match=r"^line 3: no other document has the 2 sentences its context needs$"):
        other_document_sentences(["a", "a", "a", "a", "b"], 3, seed=1)


@pytest.mark.parametrize("ids, n, message", [
    (["a", "a"], 3, r"^ids\.doc: 2 document ids for 3 input lines$"),
    (["a", "", "b"], 3, r"^ids\.doc:2: empty document id$"),
    (["a", "b", "a"], 3, r"^ids\.doc:3: document 'a' \(first at line 1\) continues after another document"),
])
def test_bad_document_ids_are_one_line_errors(ids, n, message):
    with pytest.raises(DataError, match=message):
        check_document_ids(ids, "ids.doc", n)
