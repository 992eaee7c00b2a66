"""Every prepared split as flat integer arrays on disk, memory-mapped by every process that reads it.

A corpus of millions of pairs held as Python lists costs tens of bytes per token in every
data-parallel rank; as arrays mapped from one file it costs the tokens' own bytes once, in
pages the operating system shares between the ranks.  The layout is fairseq's
MMapIndexedDataset's: per side, every sentence's ids one after another (`src.bin`) and the
n + 1 offsets that cut them into sentences (`src.idx`, int64).  `doc.bin` (int32) numbers
each sentence's document, a new number wherever the document id changes.  `meta.json`
carries the format version and is written last, so a directory without it is incomplete.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ctxnmt.data.documents import document_runs
from ctxnmt.data.vocab import PAD
from ctxnmt.errors import DataError
from ctxnmt.utils.io import atomic_write, read_json_object

FORMAT = 1
META = "meta.json"


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned type that holds every id of a vocabulary of `vocab_size`."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


class Side:
    """One side of a corpus: sentence i is ids[offsets[i]:offsets[i + 1]].  It reads as a list of
    id lists (len, [i], iteration), and hands whole batches over as padded tensors (`gather`)."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray):
        self.ids, self.offsets = ids, offsets
        self.lens = np.diff(offsets)

    @classmethod
    def from_lists(cls, seqs) -> Side:
        lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        ids = np.fromiter((t for s in seqs for t in s), dtype=np.int64, count=int(offsets[-1]))
        return cls(ids, offsets)

    def __len__(self) -> int:
        return len(self.lens)

    def __getitem__(self, i: int) -> list[int]:
        return self.ids[self.offsets[i]:self.offsets[i + 1]].tolist()

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def head(self, n: int) -> Side:
        """The first n sentences, a view of the same arrays."""
        return Side(self.ids, self.offsets[:n + 1])

    def gather(self, rows: np.ndarray, lens: np.ndarray | None = None, pad: int = PAD) -> tuple[torch.Tensor, torch.Tensor]:
        """The sentences `rows` as a (B, W) long tensor padded with `pad`, and its float mask;
        W is the longest one's length (at least 1).  `lens` overrides a row's length (0: an
        empty slot)."""
        rows = np.asarray(rows, dtype=np.int64)
        lens = self.lens[rows] if lens is None else lens
        width = max(1, int(lens.max(initial=0)))
        cols = np.arange(width)
        real = cols < lens[..., None]
        where = np.where(real, self.offsets[rows][..., None] + cols, 0)
        ids = np.where(real, self.ids[where] if len(self.ids) else 0, pad).astype(np.int64)
        return torch.from_numpy(ids), torch.from_numpy(real.astype(np.float32))


@dataclass
class TokenArrays:
    """A prepared split: both sides, and where there are document ids, each
    sentence's document number (`docs`) and why they cannot describe documents, if they
    cannot (`doc_problem`, raised only for a model that reads documents)."""

    src: Side
    tgt: Side
    docs: np.ndarray | None = None
    doc_problem: str = ""

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def from_lists(cls, src, tgt, docs: list[str] | None = None) -> TokenArrays:
        runs, problem = document_runs(docs) if docs is not None else (None, "")
        return cls(Side.from_lists(src), Side.from_lists(tgt), runs, problem)

    @classmethod
    def open(cls, directory: Path) -> TokenArrays:
        """Map a directory written by `ArrayWriter`; nothing is read but the offsets."""
        meta = read_meta(directory)
        dtype = np.dtype(meta["dtype"])

        def side(name: str) -> Side:
            offsets = _map(directory / f"{name}.idx", np.int64, meta["sentences"] + 1)
            return Side(_map(directory / f"{name}.bin", dtype, int(offsets[-1])), offsets)

        docs = _map(directory / "doc.bin", np.int32, meta["sentences"]) if meta["docs"] else None
        return cls(side("src"), side("tgt"), docs, meta.get("doc_problem", ""))

    def save(self, directory: Path, dtype: np.dtype, **meta) -> None:
        """Write the arrays in the form `open` maps (a split small enough to be held whole, as
        the dev split is); `meta` goes into meta.json."""
        writer = ArrayWriter(directory, dtype, self.docs is not None)
        writer.add(self.src.ids, self.src.lens, self.tgt.ids, self.tgt.lens, self.docs)
        writer.close(self.doc_problem, **meta)


def read_meta(directory: Path) -> dict:
    meta = read_json_object(directory / META)
    if meta.get("format") != FORMAT:
        raise DataError(f"{directory / META}: format {meta.get('format')!r} is not one this version reads "
                        f"({FORMAT}); prepare the data again ('ctxnmt prepare --force')")
    return meta


def _map(path: Path, dtype, count: int) -> np.ndarray:
    expected = count * np.dtype(dtype).itemsize
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise DataError(f"{path}: missing; prepare the data again ('ctxnmt prepare --force')") from None
    if size != expected:
        raise DataError(f"{path}: {size} bytes where {expected} were written; prepare the data again")
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


class ArrayWriter:
    """Writes a `TokenArrays` directory sentence block by sentence block, so that memory stays
    bounded by a block; `close` writes meta.json last.  The ids arrive as int64 and are stored
    in `dtype`."""

    def __init__(self, directory: Path, dtype: np.dtype, docs: bool):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / META).unlink(missing_ok=True)  # incomplete from here until close()
        self.directory, self.dtype, self.has_docs = directory, np.dtype(dtype), docs
        self.files = {name: open(directory / name, "wb") for name in
                      ("src.bin", "src.idx", "tgt.bin", "tgt.idx") + (("doc.bin",) if docs else ())}
        self.ends = {"src": 0, "tgt": 0}
        for name in ("src", "tgt"):
            self.files[f"{name}.idx"].write(np.zeros(1, dtype=np.int64).tobytes())
        self.sentences = 0

    def add(self, src_ids: np.ndarray, src_lens: np.ndarray, tgt_ids: np.ndarray, tgt_lens: np.ndarray,
            docs: np.ndarray | None = None) -> None:
        for name, ids, lens in (("src", src_ids, src_lens), ("tgt", tgt_ids, tgt_lens)):
            self.files[f"{name}.bin"].write(np.asarray(ids).astype(self.dtype).tobytes())
            offsets = self.ends[name] + np.cumsum(lens, dtype=np.int64)
            self.files[f"{name}.idx"].write(offsets.tobytes())
            if len(offsets):
                self.ends[name] = int(offsets[-1])
        if self.has_docs:
            self.files["doc.bin"].write(np.asarray(docs, dtype=np.int32).tobytes())
        self.sentences += len(src_lens)

    def close(self, doc_problem: str = "", **extra) -> None:
        for handle in self.files.values():
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
        meta = {"format": FORMAT, "sentences": self.sentences, "dtype": self.dtype.name, "docs": self.has_docs,
                "doc_problem": doc_problem, "tokens": dict(self.ends), **extra}
        with atomic_write(self.directory / META, "w") as fh:
            json.dump(meta, fh, indent=1)

    def abort(self) -> None:
        for handle in self.files.values():
            handle.close()
