"""Training progress on stderr: a tqdm bar on a terminal; elsewhere (a log file, a pipe, a
batch system's output) a plain line now and then, since a bar redrawn with carriage
returns fills a file with thousands of overwritten copies of itself."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tqdm import tqdm

from ctxnmt.utils.messages import Log, to_stderr

PLAIN_EVERY_S = 60.0  # seconds between plain progress lines


class PlainProgress:
    """The figures of the bar (position, total, the postfix) as one line every `every`
    seconds; the same calls as the tqdm bar the loop drives (update, set_postfix_str, close)."""

    def __init__(self, total: int | None, initial: int, unit: str, log: Log = to_stderr,
                 every: float = PLAIN_EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.total, self.n, self.unit = total, initial, unit
        self.log, self.every, self.clock = log, every, clock
        self.postfix = ""
        self.last = clock()

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            self.log(self.line())

    def line(self) -> str:
        done = f"{self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%)" if self.total \
            else f"{self.n} {self.unit}"
        return f"training: {done}" + (f", {self.postfix}" if self.postfix else "")

    def close(self) -> None:
        """Nothing to clear: the lines stay as written."""


def progress(total: int | None, initial: int, unit: str, **bar_options) -> tqdm | PlainProgress:
    """A bar where stderr is a terminal, else plain lines."""
    if sys.stderr.isatty():
        return tqdm(total=total, initial=initial, unit=unit, desc="training", **bar_options)
    return PlainProgress(total, initial, unit)
