"""Stopping on SIGINT and SIGTERM at the next update boundary, so that a checkpoint is
saved instead of lost (clusters send SIGTERM before preempting a job).

The handler only records the signal; the training loop looks at it after each update,
where parameters, optimiser and RNG are consistent, saves last.pt and stops.  Repeated
signals change nothing (torchrun and cluster schedulers pass a signal on to processes
that already had it from the terminal); SIGKILL still ends a process at once.
"""
from __future__ import annotations

import signal
import threading

from ctxnmt.errors import CtxnmtError
from ctxnmt.utils.messages import to_stderr

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Preempted(CtxnmtError):
    """Training stopped on a signal after saving last.pt."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum  # the shell's convention for a death by that signal


class StopSignals:
    """Context manager: while inside, SIGINT/SIGTERM set `signum` instead of interrupting."""

    def __init__(self, announce: bool = True):
        self.signum = 0
        self.announce = announce
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._record)
        return self

    def __exit__(self, *exc) -> bool:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        return False

    def _record(self, signum, frame) -> None:
        if self.signum:
            return
        self.signum = signum
        if self.announce:
            try:  # a handler can interrupt a write to stderr; the message is then lost, not the signal
                to_stderr(f"\n{signal.Signals(signum).name}: saving last.pt at the end of this update "
                          f"(SIGKILL aborts without saving)")
            except (RuntimeError, OSError, ValueError):
                pass

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""


LAUNCHER_EXIT = "the launcher's exit"


def stop_votes(signum: int, launcher_gone: bool) -> list[float]:
    """One rank's reasons to stop, as numbers to sum over the ranks: one per signal in
    SIGNALS, then a dead launcher."""
    return [float(signum == sig) for sig in SIGNALS] + [float(launcher_gone)]


def agreed_stop(votes: list[float]) -> tuple[str, int]:
    """The cause and exit signal every rank reports, from the summed votes; ("", 0) if none.

    A launcher passes a signal on to its ranks one after the other, so one rank can
    take its decision before the signal reaches the next: the ranks must name the cause
    from the sums, not from their own handler.  A dead launcher exits as SIGTERM would."""
    for sig, count in zip(SIGNALS, votes):
        if count:
            return sig.name, sig
    return (LAUNCHER_EXIT, signal.SIGTERM) if votes[len(SIGNALS)] else ("", 0)
