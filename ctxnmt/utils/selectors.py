"""`--only NAME[:SEED]` selectors, as `ctxnmt experiment` reads them."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ctxnmt.errors import ConfigError

T = TypeVar("T")


def label(key: tuple[str, int]) -> str:
    """A run's NAME:SEED, as a selector names it."""
    return "{}:{}".format(*key)


def select(items: Sequence[T], selectors: list[str], key: Callable[[T], tuple[str, int]], what: str) -> list[T]:
    """The items named by `NAME` (every seed) or `NAME:SEED`, in selector order, each once;
    `key` gives an item's (name, seed).  A selector that names none is an error listing them."""
    chosen: list[T] = []
    for selector in selectors:
        name, _, seed = selector.partition(":")
        matches = [item for item in items if key(item)[0] == name and (not seed or str(key(item)[1]) == seed)]
        if not matches:
            known = ", ".join(dict.fromkeys(label(key(item)) for item in items))
            raise ConfigError(f"--only {selector!r} names no run of this {what} (runs: {known})")
        chosen += [item for item in matches if item not in chosen]
    return chosen
