"""The state a decoder carries through search, declared entry by entry.

Search keeps two such states: the encoder side (one row per sentence, from
`prepare`) and the decoder state (one row per hypothesis, from `init_state` and
`step`).  Each entry is declared as one of three kinds, and search touches the
entries only through that declaration:

  ROW        batch-first, one row per sentence or hypothesis: `select` gathers it
             (beams reorder, finished sentences leave)
  POSITIONS  batch-first with the source positions on axis 1 (annotations, masks,
             per-position terms): gathered like a row, and also padded when
             batches join and trimmed when the longest sources leave
  SHARED     no batch axis (e.g. a weight matrix gathered once per batch): never
             gathered, the same tensor for every row

A state may hold named parts, each a State: the target-context summary's state
inside the decoder's, an ensemble member's state inside the ensemble's.  Every
operation applies to the parts too, so nobody needs to know whose entries they are.

This is fairseq's `reorder_incremental_state` in one place: `select` is the only
reordering, `trim` and `concat` the only reshaping along the source axis.
"""
from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping

import torch
from torch.nn import functional as F


class Kind(enum.Enum):
    ROW = "row"
    POSITIONS = "positions"
    SHARED = "shared"


class State(Mapping):
    """Named tensors, each of a declared Kind, and named parts (States)."""

    __slots__ = ("_entries", "_parts")

    def __init__(self):
        self._entries: dict[str, tuple[Kind, torch.Tensor]] = {}
        self._parts: dict[str, State] = {}

    # -- declaring entries (each returns the state, so that declarations chain) ----------
    def rows(self, **tensors: torch.Tensor) -> State:
        return self._declare(Kind.ROW, tensors)

    def positions(self, **tensors: torch.Tensor) -> State:
        return self._declare(Kind.POSITIONS, tensors)

    def shared(self, **tensors: torch.Tensor) -> State:
        return self._declare(Kind.SHARED, tensors)

    def with_part(self, name: str, part: State) -> State:
        self._parts[name] = part
        return self

    def replace(self, **tensors: torch.Tensor) -> State:
        """New values for entries already declared (their kinds stay)."""
        for name, value in tensors.items():
            self._entries[name] = (self._entries[name][0], value)
        return self

    def _declare(self, kind: Kind, tensors: dict[str, torch.Tensor]) -> State:
        for name, value in tensors.items():
            if name in self._entries and self._entries[name][0] is not kind:
                raise ValueError(f"state entry '{name}' declared {self._entries[name][0].value}, now {kind.value}")
            self._entries[name] = (kind, value)
        return self

    # -- reading ----------------------------------------------------------------------------
    def __getitem__(self, name: str) -> torch.Tensor:
        return self._entries[name][1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def kind(self, name: str) -> Kind:
        return self._entries[name][0]

    def part(self, name: str) -> State:
        return self._parts[name]

    @property
    def parts(self) -> Mapping[str, State]:
        return dict(self._parts)

    def batch_size(self) -> int:
        """Rows of the first batch-first entry (of this state or its parts)."""
        for kind, value in self._entries.values():
            if kind is not Kind.SHARED:
                return value.size(0)
        for part in self._parts.values():
            return part.batch_size()
        raise ValueError("this state has no batch-first entry")

    # -- what search does with it -------------------------------------------------------------
    def select(self, index: torch.Tensor) -> State:
        """The rows `index` (a reorder, a repeat or a subset) of every batch-first entry."""
        return self._map(lambda kind, v: v if kind is Kind.SHARED else v.index_select(0, index),
                         lambda part: part.select(index))

    def slice_rows(self, start: int, stop: int) -> State:
        """Rows start … stop − 1 of every batch-first entry, as views (no copy)."""
        return self._map(lambda kind, v: v if kind is Kind.SHARED else v[start:stop],
                         lambda part: part.slice_rows(start, stop))

    def trim(self, width: int) -> State:
        """Source-position entries cut to their first `width` positions."""
        return self._map(lambda kind, v: v[:, :width].contiguous() if kind is Kind.POSITIONS else v,
                         lambda part: part.trim(width))

    def pad(self, width: int) -> State:
        """Source-position entries padded with zeros to `width` positions (masked positions,
        which get zero attention): `trim`'s inverse."""
        return self._map(lambda kind, v: _pad_positions(v, width) if kind is Kind.POSITIONS else v,
                         lambda part: part.pad(width))

    def map(self, entry) -> State:
        """Every entry's value (of its parts too) replaced by `entry(kind, value)`; the
        declarations stay."""
        return self._map(entry, lambda part: part.map(entry))

    def fits(self, other: State) -> bool:
        """Whether `concat` can join the two: the same declarations and, beyond the batch
        axis (and the source axis), the same shapes (a state that grows with t does not)."""
        if self._parts.keys() != other._parts.keys() or self._entries.keys() != other._entries.keys():
            return False
        for name, (kind, value) in self._entries.items():
            other_kind, other_value = other._entries[name]
            if kind is not other_kind:
                return False
            skip = {Kind.ROW: 1, Kind.POSITIONS: 2, Kind.SHARED: 0}[kind]
            if kind is not Kind.SHARED and value.shape[skip:] != other_value.shape[skip:]:
                return False
        return all(part.fits(other._parts[name]) for name, part in self._parts.items())

    def concat(self, other: State, width: int) -> State:
        """This state's rows, then `other`'s; source positions padded with zeros to `width`
        (masked positions, which get zero attention).  Shared entries are this state's."""
        out = State()
        for name, (kind, value) in self._entries.items():
            if kind is Kind.POSITIONS:
                value = torch.cat([_pad_positions(value, width), _pad_positions(other[name], width)])
            elif kind is Kind.ROW:
                value = torch.cat([value, other[name]])
            out._entries[name] = (kind, value)
        out._parts = {name: part.concat(other._parts[name], width) for name, part in self._parts.items()}
        return out

    def _map(self, entry, part) -> State:
        out = State()
        out._entries = {name: (kind, entry(kind, value)) for name, (kind, value) in self._entries.items()}
        out._parts = {name: part(p) for name, p in self._parts.items()}
        return out

    def __repr__(self) -> str:
        entries = ", ".join(f"{n}: {k.value} {tuple(v.shape)}" for n, (k, v) in self._entries.items())
        parts = "".join(f", {n}: {p!r}" for n, p in self._parts.items())
        return f"State({entries}{parts})"


def _pad_positions(x: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(x, (0, 0) * (x.dim() - 2) + (0, width - x.size(1)))
