"""Syntactic-like trees from target-side attention (the papers' Algorithm 1), Penn
Treebank bracket reading, and unlabelled ParsEval against reference trees.

A binary tree over n words is a nested pair of word indices: ``((0, 1), (2, 3))``.
Its constituents are the spans (start, end) (end exclusive) of its nodes that cover
at least two words.

Tree induction (`attention_tree`), as implemented here.  A[t][i] (i < t) is the
attention the t-th word pays to the earlier word i.  Inside a span of words
[lo, hi) only the span's own words count, and the focus of word t is its most
attended earlier word of the span, f_t = argmax_{lo ≤ i < t} A[t][i] (the first on
ties).  Reading the span left to right, a new constituent starts every time the
focus moves to a new word (f_t ≠ f_{t-1}); the constituents are split again
recursively, and joined right-branching.  A span whose words all keep one focus
(necessarily its first word, the only choice of word lo+1) becomes (first word, rest).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ctxnmt.errors import DataError

Tree = int | tuple  # a word index, or a pair of subtrees


# -- trees from attention -----------------------------------------------------------

def attention_tree(A, lo: int = 0, hi: int | None = None) -> Tree:
    """Binary tree over words lo … hi-1 from a word-to-earlier-word attention matrix."""
    hi = len(A) if hi is None else hi
    if hi - lo < 1:
        raise ValueError("a tree needs at least one word")
    if hi - lo == 1:
        return lo
    focus = {t: max(range(lo, t), key=lambda i: A[t][i]) for t in range(lo + 1, hi)}
    starts = [lo] + [t for t in range(lo + 2, hi) if focus[t] != focus[t - 1]]
    if len(starts) == 1:  # one focus for the whole span: its first word heads the rest
        return lo, attention_tree(A, lo + 1, hi)
    ends = starts[1:] + [hi]
    return right_join([attention_tree(A, a, b) for a, b in zip(starts, ends)])


def right_join(subtrees: Sequence[Tree]) -> Tree:
    tree = subtrees[-1]
    for sub in reversed(subtrees[:-1]):
        tree = (sub, tree)
    return tree


def right_branching(n: int) -> Tree:
    """The baseline (w_0 (w_1 (… w_{n-1})))."""
    return right_join(list(range(n)))


def tree_spans(tree: Tree) -> set[tuple[int, int]]:
    spans: set[tuple[int, int]] = set()

    def walk(node) -> tuple[int, int]:
        if isinstance(node, int):
            return node, node + 1
        (a, _), (_, b) = walk(node[0]), walk(node[1])
        spans.add((a, b))
        return a, b

    walk(tree)
    return spans


def brackets(tree: Tree, words: Sequence[str]) -> str:
    """Bracket notation with the words as leaves, e.g. ((the cat) (sat down))."""
    if isinstance(tree, int):
        return words[tree].replace("(", "-LRB-").replace(")", "-RRB-")  # as Penn Treebank escapes them
    return f"({brackets(tree[0], words)} {brackets(tree[1], words)})"


# -- Penn Treebank brackets -----------------------------------------------------------

@dataclass
class RefTree:
    """A reference tree with labels dropped: its words and its constituent spans."""

    words: list[str]
    spans: set[tuple[int, int]]


_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def parse_ptb(text: str, source: str = "<trees>") -> list[RefTree]:
    """Every tree in a Penn Treebank bracket file ("(S (NP (DT the) (NN cat)) …)", one
    or more lines each, optionally wrapped in an unlabelled "( … )").  Labels are
    ignored, leaves are the words; empty elements (-NONE-) are dropped."""
    tokens = _TOKEN.findall(text)
    trees, pos = [], 0
    while pos < len(tokens):
        if tokens[pos] != "(":
            raise DataError(f"{source}: tree {len(trees) + 1}: expected '(' but found {tokens[pos]!r}")
        node, pos = _read_node(tokens, pos, source, len(trees) + 1)
        words: list[str] = []
        spans: set[tuple[int, int]] = set()
        _collect(node, words, spans)
        if not words:
            raise DataError(f"{source}: tree {len(trees) + 1} has no words")
        trees.append(RefTree(words, spans))
    return trees


def _read_node(tokens, pos, source, number):
    """(label, children) starting at tokens[pos] == '('; children are nodes or words."""
    pos += 1
    label = ""
    if pos < len(tokens) and tokens[pos] not in "()":
        label, pos = tokens[pos], pos + 1
    children: list = []
    while pos < len(tokens) and tokens[pos] != ")":
        if tokens[pos] == "(":
            child, pos = _read_node(tokens, pos, source, number)
            children.append(child)
        else:
            children.append(tokens[pos])
            pos += 1
    if pos >= len(tokens):
        raise DataError(f"{source}: tree {number}: unbalanced brackets (a ')' is missing)")
    return (label, children), pos + 1


def _collect(node, words: list[str], spans: set) -> None:
    label, children = node
    if label == "-NONE-":
        return
    start = len(words)
    for child in children:
        if isinstance(child, str):
            words.append(child)
        else:
            _collect(child, words, spans)
    if len(words) - start >= 2:
        spans.add((start, len(words)))


# -- ParsEval ------------------------------------------------------------------------

@dataclass
class ParsEval:
    """Unlabelled constituent counts, summed over sentences (micro-averaged scores)."""

    matched: int = 0
    predicted: int = 0
    gold: int = 0

    def add(self, predicted: set, gold: set, n_words: int, include_root: bool = False) -> None:
        if not include_root:
            predicted, gold = predicted - {(0, n_words)}, gold - {(0, n_words)}
        self.matched += len(predicted & gold)
        self.predicted += len(predicted)
        self.gold += len(gold)

    @property
    def precision(self) -> float:
        return self.matched / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.matched / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def line(self) -> str:
        return (f"precision {100 * self.precision:.2f}  recall {100 * self.recall:.2f}  f1 {100 * self.f1:.2f}  "
                f"({self.matched} matched, {self.predicted} predicted, {self.gold} reference constituents)")
