"""Trainings side by side, each in a process of its own.

On a CPU a training runs fastest on one or two threads, so a machine with more cores
trains several runs of a comparison at once.  Every call gets a freshly spawned process
(not a fork: the parent may already hold an OpenMP thread pool, which a forked child
inherits in a broken state; and not a reused worker, so that no call sees another's
state).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ctxnmt.errors import ConfigError, CtxnmtError
from ctxnmt.utils.preemption import Preempted, StopSignals


def check_jobs(jobs: int, threads: int, log) -> None:
    """A clear error for a job count below 1; a warning when the jobs' threads oversubscribe the cores."""
    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, not {jobs}")
    cores = os.cpu_count() or 1
    threads = threads or cores  # 0: a training takes every core
    if jobs > 1 and jobs * threads > cores:
        log(f"{jobs} jobs of {threads} thread(s) each on {cores} cores: they will slow each other down "
            "(set training.threads so that jobs × threads ≤ cores)")


def _call(function: Callable[..., Any], args: tuple) -> tuple[str, str, int | None] | None:
    """In the worker: None if the call succeeds, else (kind, message, exit code) as plain
    picklable values, so that no exception class has to survive the trip back."""
    try:
        function(*args)
    except CtxnmtError as err:
        return "user", str(err), getattr(err, "exit_code", None)
    except BaseException as err:  # noqa: BLE001 - KeyboardInterrupt too: the parent decides
        return "crash", "".join(traceback.format_exception(err)).rstrip(), None
    return None


class _Forward(StopSignals):
    """While inside: SIGINT and SIGTERM sent to this process are recorded (no further call
    starts) and passed on to the workers, which save a checkpoint and stop, or die; so no
    worker outlives the parent."""

    def __init__(self, pool: ProcessPoolExecutor):
        super().__init__(announce=False)
        self.pool = pool

    def _record(self, signum, frame) -> None:
        super()._record(signum, frame)
        for pid in list(getattr(self.pool, "_processes", None) or {}):  # the executor's own worker table
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass


def _executor(jobs: int) -> ProcessPoolExecutor:
    context = multiprocessing.get_context("spawn")
    if sys.version_info >= (3, 11):
        return ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1)
    return ProcessPoolExecutor(max_workers=jobs, mp_context=context)  # pragma: no cover - Python 3.10


def run_side_by_side(calls: list[tuple[str, Callable[..., Any], tuple]], jobs: int, log) -> None:
    """Run each (name, function, arguments) call in order, at most `jobs` at once, each in a
    new process; the function must be importable (module level) and its arguments picklable.

    Each call's end is logged as it happens, a failure with its message.  After a failure
    or a signal no further call starts; the running ones finish (a training stopped
    half-way would only resume from its last checkpoint), except when a process dies
    (killed, out of memory): the pool then stops the others too.  Then the first failure
    is raised, a user's error (CtxnmtError) as one with the name of its call."""
    queue = list(calls)
    running: dict[Future, str] = {}
    failures: list[tuple[str, str, str, int | None]] = []
    finished = 0
    with _executor(jobs) as pool, _Forward(pool) as signals:
        while queue or running:
            while queue and len(running) < jobs and not failures and not signals.signum:
                name, function, args = queue.pop(0)
                running[pool.submit(_call, function, args)] = name
                log(f"{name}: started")
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                name = running.pop(future)
                try:
                    outcome = future.result()
                except BrokenProcessPool:
                    outcome = ("user", "its process died (killed, or out of memory); it goes on from its last "
                                       "checkpoint when run again", None)
                if outcome is None:
                    finished += 1
                    log(f"{name}: finished ({finished} of {len(calls)})")
                else:
                    log(f"{name}: failed: {outcome[1].splitlines()[-1]}")
                    failures.append((name, *outcome))
    _raise_first(failures, signals.signum)


def _raise_first(failures: list[tuple[str, str, str, int | None]], signum: int) -> None:
    if signum:
        raise Preempted(f"stopped by {signal.Signals(signum).name}: the runs that were training saved their last "
                        "checkpoint or go on from the one before", signum)
    if not failures:
        return
    name, kind, message, exit_code = failures[0]
    if kind == "crash":
        raise RuntimeError(f"{name} failed in its process:\n{message}")
    if exit_code:
        raise Preempted(f"{name}: {message}", exit_code - 128)
    raise CtxnmtError(f"{name}: {message}")
