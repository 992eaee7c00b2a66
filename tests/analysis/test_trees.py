"""Algorithm 1's trees on hand-made attention matrices, Penn Treebank reading and
unlabelled ParsEval against numbers computed by hand."""
from __future__ import annotations

import pytest

from ctxnmt.analysis.trees import ParsEval, attention_tree, brackets, parse_ptb, right_branching, tree_spans
from ctxnmt.errors import DataError


def lower(rows):
    """A[t][i] for i < t from the listed rows (row 0 is empty)."""
    return [[]] + rows


def test_a_focus_move_starts_a_new_constituent():
    # words 1 attends 0; 2 and 3 both attend 1: the focus moves at word 2, not at 3
    A = lower([[1.0], [0.2, 0.8], [0.1, 0.7, 0.2]])
    assert attention_tree(A) == ((0, 1), (2, 3))
    assert brackets(attention_tree(A), "the cat sat down".split()) == "((the cat) (sat down))"


def test_one_focus_throughout_gives_the_right_branching_tree():
    A = lower([[1.0], [0.9, 0.1], [0.8, 0.1, 0.1], [0.7, 0.1, 0.1, 0.1]])
    assert attention_tree(A) == right_branching(5) == (0, (1, (2, (3, 4))))


def test_always_attending_the_previous_word():
    A = lower([[1.0], [0.1, 0.9], [0.1, 0.1, 0.8], [0.0, 0.1, 0.1, 0.8]])
    # foci 0, 1, 2, 3 move at every word from the second on: (w0 w1), w2, w3, w4 joined right-branching
    assert attention_tree(A) == ((0, 1), (2, (3, 4)))


def test_attention_outside_a_span_is_ignored_inside_it():
    # top level: foci 0, 1, 1, 0 -> runs [0,2) [2,4) [4,5); inside [2,4) word 3 may only attend 2
    A = lower([[1.0], [0.3, 0.7], [0.1, 0.6, 0.3], [0.5, 0.2, 0.2, 0.1]])
    assert attention_tree(A) == ((0, 1), ((2, 3), 4))
    assert tree_spans(attention_tree(A)) == {(0, 2), (2, 4), (2, 5), (0, 5)}


def test_single_word():
    assert attention_tree([[]]) == 0 and tree_spans(0) == set()


PTB = """
(ROOT (S (NP (DT The) (NN cat)) (VP (VBD sat) (PRT (RP down))) (. .)))
( (S (NP-SBJ (-NONE- *)) (VP (VB Go)
     (ADVP (RB now)))) )
"""


def test_ptb_reading_ignores_labels_unaries_and_empty_elements():
    first, second = parse_ptb(PTB)
    assert first.words == ["The", "cat", "sat", "down", "."]
    assert first.spans == {(0, 2), (2, 4), (0, 5)}  # NP, VP, S (= ROOT); single words are no constituents
    assert second.words == ["Go", "now"] and second.spans == {(0, 2)}


@pytest.mark.parametrize("text, message", [("(S (NP (DT the) (NN cat))", "unbalanced"),
                                           ("S (NP the)", "expected"), ("(S (-NONE- *))", "no words")])
def test_bad_ptb_is_a_clear_error(text, message):
    with pytest.raises(DataError, match=message):
        parse_ptb(text, "ref.mrg")


def test_parseval_by_hand():
    gold = parse_ptb(PTB)[0].spans  # {(0,2), (2,4)} without the root
    predicted = tree_spans(((0, 1), ((2, 3), 4)))  # {(0,2), (2,4), (2,5)} without the root
    score = ParsEval()
    score.add(predicted, gold, 5)
    assert (score.matched, score.predicted, score.gold) == (2, 3, 2)
    assert score.precision == pytest.approx(2 / 3) and score.recall == 1.0 and score.f1 == pytest.approx(0.8)
    baseline = ParsEval()
    baseline.add(tree_spans(right_branching(5)), gold, 5)  # (1,5) (2,5) (3,5): none in the reference
    assert (baseline.matched, baseline.predicted, baseline.gold) == (0, 3, 2) and baseline.f1 == 0.0
    with_root = ParsEval()
    with_root.add(tree_spans(right_branching(5)), gold, 5, include_root=True)
    assert (with_root.matched, with_root.predicted, with_root.gold) == (1, 4, 3)
    # micro-averaged over sentences: counts add up
    score.add(tree_spans(right_branching(5)), gold, 5)
    assert (score.matched, score.predicted, score.gold) == (2, 6, 4) and score.precision == pytest.approx(1 / 3)
