"""Reading and writing line-aligned corpus files.

Every problem with a user's files is reported as a :class:`DataError` naming
the file (and the 1-based line where there is one), because these files are
usually large and hand-assembled, and "somewhere in train.es" is no help.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ctxnmt.errors import DataError
from ctxnmt.utils.io import atomic_write


@dataclass
class ParallelCorpus:
    """Line-aligned source and target sentences, with optional document ids."""

    src: list[str]
    tgt: list[str]
    docs: list[str] | None = None

    def __len__(self) -> int:
        return len(self.src)


def read_lines(path: str | os.PathLike, allow_empty: bool = False) -> list[str]:
    """Return the lines of a UTF-8 file without their line terminators.

    Raises DataError if the file is missing, not valid UTF-8 (naming the line
    and column of the first bad byte) or, unless ``allow_empty``, empty.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a text file") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror})") from None
    if not data and not allow_empty:
        raise DataError(f"{path}: file is empty")
    return decode_lines(data, path)


def decode_lines(data: bytes, name: str) -> list[str]:
    """Split UTF-8 bytes into lines without terminators; ``name`` identifies the source in errors."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        _raise_decode_error(name, data)
    return split_lines(text)


def split_lines(text: str) -> list[str]:
    """The lines of `text`: a line ends at \n (or \r\n), and only there (not at the other
    breaks str.splitlines knows, such as U+2028, which a sentence may hold), and a final
    line break starts no new line."""
    lines = text.split("\n")
    if lines[-1] == "":  # the usual final newline does not start a new line
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _raise_decode_error(name: str, data: bytes) -> None:
    """Locate the first undecodable byte line by line, so the message can name it."""
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as err:
            byte = raw[err.start]
            raise DataError(f"{name}:{number}: invalid UTF-8 (byte 0x{byte:02x} at column {err.start + 1})") from None
    # Unreachable in practice: bytes that fail as a whole fail on some line.
    raise DataError(f"{name}: invalid UTF-8")


def read_parallel(
    src_path: str | os.PathLike, tgt_path: str | os.PathLike, doc_path: str | os.PathLike | None = None
) -> ParallelCorpus:
    """Read a source file, a target file and optionally a document-id file, checking they align."""
    src = read_lines(src_path)
    tgt = read_lines(tgt_path)
    check_same_length(src_path, src, tgt_path, tgt)
    docs = None
    if doc_path is not None:
        docs = read_lines(doc_path)
        check_same_length(src_path, src, doc_path, docs)
    return ParallelCorpus(src=src, tgt=tgt, docs=docs)


def check_same_length(path_a, lines_a: Sequence[str], path_b, lines_b: Sequence[str]) -> None:
    """Refuse two files that should be line-aligned but are not, naming both."""
    if len(lines_a) != len(lines_b):
        raise DataError(
            f"{os.fspath(path_a)} has {len(lines_a)} lines but {os.fspath(path_b)} has {len(lines_b)}"
        )


def write_lines_atomic(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """Write one line per item (newline-terminated), replacing ``path`` only once all are written."""
    with atomic_write(path, "w") as handle:
        for line in lines:
            if "\n" in line:
                # A stray newline would silently shift every later line out of alignment.
                raise ValueError(f"{os.fspath(path)}: refusing to write a line containing a newline: {line[:60]!r}")
            handle.write(line)
            handle.write("\n")
