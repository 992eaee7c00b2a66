"""One training per model directory at a time.

Two processes training into one directory (two `--only` runs given the same run, a
command started twice) would overwrite each other's checkpoints and logs.  A trainer
holds an exclusive `flock` on `{model_dir}/.lock` from its start to its end; the kernel
drops it when the process ends, however it ends, so a killed training never leaves a
stale lock behind.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ctxnmt.errors import CtxnmtError

LOCK_FILE = ".lock"


class DirectoryBusy(CtxnmtError):
    """Another process is training in this model directory."""


class TrainingLock:
    def __init__(self, directory: Path):
        self.path = Path(directory) / LOCK_FILE
        self._file = None

    def acquire(self) -> TrainingLock:
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise DirectoryBusy(f"{self.path.parent}: another process (pid {holder}) is training in it; "
                                "wait for it to end or use another model_dir") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the lock
            self._file = None


@contextlib.contextmanager
def waiting_for(path: Path):
    """Hold an exclusive `flock` on the file `path` for the `with` block, waiting while
    another process holds it: work that two processes would otherwise both begin (the data
    an experiment's runs share) is done by the first, and the second finds it done."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # closing the file drops it, however the block ends
        yield
