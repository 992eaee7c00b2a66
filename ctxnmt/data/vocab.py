"""Token vocabularies: the mapping between subword strings and embedding rows."""
from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Iterable, Sequence

from ctxnmt.data.corpus import read_lines, write_lines_atomic
from ctxnmt.errors import DataError

PAD, UNK, EOS, BOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "</s>", "<s>")
_SPECIAL_SPELLINGS = frozenset(SPECIALS)


class Vocab:
    """An ordered list of tokens; the four special symbols always come first."""

    def __init__(self, tokens: Sequence[str]):
        """``tokens`` are the ordinary tokens, without the special symbols."""
        self._tokens: list[str] = list(SPECIALS)
        self._index: dict[str, int] = {token: i for i, token in enumerate(SPECIALS)}
        for token in tokens:
            if token in self._index:
                raise ValueError(f"duplicate token in vocabulary: {token!r}")
            if not token or any(char.isspace() for char in token):
                raise ValueError(f"vocabulary tokens cannot be empty or contain whitespace: {token!r}")
            self._index[token] = len(self._tokens)
            self._tokens.append(token)

    @classmethod
    def build(cls, token_lists: Iterable[Iterable[str]], max_size: int | None = None, min_freq: int = 1) -> Vocab:
        """Count tokens and keep the most frequent.

        Order is by decreasing frequency, ties alphabetical, so the same data
        always gives the same ids. ``max_size`` counts ordinary tokens only
        (the special symbols come on top).
        """
        counts: Counter = Counter()
        for tokens in token_lists:
            counts.update(tokens)
        for special in SPECIALS:
            counts.pop(special, None)  # a literal "<unk>" in the data is just unknown
        ranked = sorted((token for token, count in counts.items() if count >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[:max_size]
        return cls(ranked)

    def save(self, path: str | os.PathLike) -> None:
        """Write one token per line, the special symbols first."""
        write_lines_atomic(path, self._tokens)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        """Read a file written by :meth:`save`; raises DataError naming the file and line at fault."""
        lines = read_lines(path)
        path = os.fspath(path)
        for number, (found, expected) in enumerate(zip(lines, SPECIALS), start=1):
            if found != expected:
                raise DataError(f"{path}:{number}: expected special symbol {expected!r}, found {found!r}")
        if len(lines) < len(SPECIALS):
            raise DataError(f"{path}: only {len(lines)} lines; a vocabulary starts with {', '.join(SPECIALS)}")
        seen: dict[str, int] = {}
        for number, token in enumerate(lines, start=1):
            if not token or any(char.isspace() for char in token):
                raise DataError(f"{path}:{number}: empty token or token containing whitespace")
            if token in seen:
                raise DataError(f"{path}:{number}: token {token!r} already on line {seen[token]}")
            seen[token] = number
        return cls(lines[len(SPECIALS):])

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: str) -> bool:
        return token in self._index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self._tokens == other._tokens

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens, fingerprint {self.fingerprint()})"

    def index(self, token: str) -> int:
        """The id of ``token``, or UNK."""
        return self._index.get(token, UNK)

    def token(self, index: int) -> str:
        """The token with id ``index``; raises IndexError outside the vocabulary."""
        if not 0 <= index < len(self._tokens):
            raise IndexError(f"token id {index} outside a vocabulary of {len(self._tokens)}")
        return self._tokens[index]

    def tokens(self) -> list[str]:
        """All tokens in id order, special symbols included."""
        return list(self._tokens)

    def encode(self, tokens: Iterable[str], add_eos: bool = True) -> list[int]:
        """Token ids, unknown tokens mapped to UNK, with EOS appended unless ``add_eos`` is false.
        A special symbol's spelling in the text ("<pad>", "</s>") is an unknown word too, as
        `build` counts it: read as the symbol, it would mask the rest of a source as padding
        or end an output early."""
        lookup = self._index.get
        ids = [UNK if token in _SPECIAL_SPELLINGS else lookup(token, UNK) for token in tokens]
        if add_eos:
            ids.append(EOS)
        return ids

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens up to (not including) the first EOS, leaving out PAD and BOS."""
        out: list[str] = []
        for index in ids:
            index = int(index)  # accepts tensor elements and numpy integers too
            if index == EOS:
                break
            if index not in (PAD, BOS):
                out.append(self.token(index))
        return out

    def fingerprint(self) -> str:
        """A short hash of the token list, for checking that a checkpoint matches this vocabulary."""
        digest = hashlib.sha256("\n".join(self._tokens).encode("utf-8"))
        return digest.hexdigest()[:16]
