"""Progress and warnings, said one way: a `Log` is a callable that takes one line of text.

Code with something to report takes a `log` (for warnings, a `warn`) from its caller and
calls it; the command at the top decides where the lines go.  A test passes `list.append`;
a command passes `stderr_log(prefix)`, and library code left to itself says it on stderr
(`to_stderr`, `warn`).  Every line for the terminal goes through tqdm, so that a running
progress bar (`ctxnmt train`) is redrawn below the line instead of being broken by it.  The
training log (ctxnmt.training.log) keeps its lines in train.log as well.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tqdm import tqdm

Log = Callable[[str], None]


def stderr_log(prefix: str = "", dated: bool = False) -> Log:
    """A Log writing each line to stderr after `prefix`; `dated`: after the date and time to
    the millisecond as well, which a long-running server's log wants."""

    def log(message: str) -> None:
        stamp = f"{_now()} " if dated else ""
        tqdm.write(f"{stamp}{prefix}{message}", file=sys.stderr)  # sys.stderr as it is now, not at import

    return log


def _now() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now % 1 * 1000):03d}"


to_stderr: Log = stderr_log()
warn: Log = stderr_log("warning: ")
