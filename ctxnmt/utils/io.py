"""File helpers that never leave a half-written file behind."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from ctxnmt.errors import DataError


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; on success rename it over ``path``.

    ``mode`` is ``"w"`` (UTF-8 text) or ``"wb"``. The data is flushed and
    fsynced before the rename, so a crash leaves either the old file or the
    complete new one. If the body raises, the temporary file is removed and
    ``path`` is left exactly as it was.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write: mode must be 'w' or 'wb', not {mode!r}")
    path = os.fspath(path)
    # Same directory as the target: os.replace is only atomic within one file system.
    directory = os.path.dirname(os.path.abspath(path))
    check_writable(path)  # a directory is found now, not by os.replace once the body's work is done
    try:
        fd, tmp_path = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    except OSError as err:
        raise DataError(f"{path}: cannot be written ({err.strerror})") from None
    try:
        if mode == "w":
            handle = open(fd, mode, encoding="utf-8", newline="\n")
        else:
            handle = open(fd, mode)
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        _keep_umask_permissions(tmp_path)
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_path)
        raise


def check_writable(path: str | os.PathLike) -> None:
    """Refuse, naming it, an output path that is a directory or whose directory does not exist:
    commands check their outputs before hours of work that atomic_write would then fail to keep."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise DataError(f"{path}: is a directory, not a file to write")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise DataError(f"{path}: there is no directory {directory} to write it in")


def check_not_a_file(path: str | os.PathLike) -> None:
    """Refuse a directory-to-be where a file is, before the work that would fill it."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise DataError(f"{path}: is a file, not a directory")


def make_directory(path: str | os.PathLike) -> Path:
    """Create a directory (and its parents) where none is, or refuse in one line: a file in
    its place, or a place it cannot be made in (no permission, a read-only file system)."""
    path = Path(path)
    check_not_a_file(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"{path}: cannot be made a directory ({err.strerror})") from None
    return path


def _keep_umask_permissions(tmp_path: str | os.PathLike, directory: bool = False) -> None:
    """Give the file (or directory) the mode a plain ``open()`` (``mkdir``) would have given it.

    mkstemp and mkdtemp create them as 0600 and 0700; corpus files, checkpoints and
    exported results are meant to be shared like any other output.
    """
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, (0o777 if directory else 0o666) & ~umask)


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def copy_into(files: Iterable[Path], target: Path, last: tuple[str, ...] = (), replace: bool = False) -> None:
    """Copy `files` into directory `target` (created, or already holding other files, which
    stay unless `replace`) so that an interruption never leaves a copy that looks whole: they
    are copied to a temporary sibling first, then moved in, the names in `last` (what marks
    the copy complete) last; with `replace`, the old directory is swapped out whole."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        _keep_umask_permissions(tmp, directory=True)
        for path in files:
            shutil.copyfile(path, tmp / path.name)
        if target.exists() and replace:
            old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old."))
            os.replace(target, old / target.name)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        elif target.exists():
            for path in sorted(tmp.iterdir(), key=lambda p: last.index(p.name) + 1 if p.name in last else 0):
                os.replace(path, target / path.name)
            tmp.rmdir()
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_json_object(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object in file `path`; a DataError naming the file where it is missing, not
    JSON (a hand edit, a merge conflict in committed results) or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object, not {type(data).__name__}")
    return data
