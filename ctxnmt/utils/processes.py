"""Trainings side by side, each in a process of its own.

On a CPU a training runs fastest on one or two threads, so a machine with more cores
trains several runs of a comparison at once.  Each call runs in a freshly spawned
process rather than a fork: the parent may already hold an OpenMP thread pool, which a
forked child inherits in a broken state.
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from ctxnmt.errors import ConfigError, CtxnmtError


def check_jobs(jobs: int, threads: int, log) -> None:
    """A clear error for a job count below 1; a warning when the jobs' threads oversubscribe the cores."""
    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, not {jobs}")
    cores = os.cpu_count() or 1
    threads = threads or cores  # 0: a training takes every core
    if jobs > 1 and jobs * threads > cores:
        log(f"{jobs} jobs of {threads} thread(s) each on {cores} cores: they will slow each other down "
            "(set training.threads so that jobs × threads ≤ cores)")


def run_side_by_side(calls: list[tuple[str, Callable[..., Any], tuple]], jobs: int, log) -> None:
    """Run each (name, function, arguments) call in order, at most `jobs` at once, each in
    its own process; the function must be importable (module level) and its arguments
    picklable.

    After a failure no further call starts; those running finish (a training killed
    half-way would only resume from its last checkpoint), and then the failure is raised,
    a user's error (CtxnmtError) with the name of its call."""
    queue = list(calls)
    running: dict[Future, str] = {}
    failure: tuple[str, BaseException] | None = None
    finished_count = 0
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        while queue or running:
            while queue and len(running) < jobs:
                name, function, args = queue.pop(0)
                running[pool.submit(function, *args)] = name
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                name = running.pop(future)
                error = future.exception()
                if error is None:
                    finished_count += 1
                    log(f"{name}: finished ({finished_count} of {len(calls)})")
                elif failure is None:
                    failure = (name, error)
                    queue.clear()
    if failure is not None:
        name, error = failure
        if isinstance(error, CtxnmtError):
            raise type(error)(f"{name}: {error}") from None
        raise error
