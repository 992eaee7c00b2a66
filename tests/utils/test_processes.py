"""Trainings side by side: calls really run at once in processes of their own, at most
`jobs` of them, in order, and a failure stops what has not started and names its call."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ctxnmt.errors import ConfigError
from ctxnmt.utils.processes import check_jobs, run_side_by_side


def rendezvous(directory: str, me: str, other: str) -> None:
    """Succeeds only if `other` is running at the same time: each waits for the other's mark."""
    Path(directory, me).write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not Path(directory, other).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{other} never ran beside {me}")
        time.sleep(0.01)


def record(directory: str, name: str) -> None:
    """Leaves its start and end time in a file of its name."""
    start = time.time()
    time.sleep(0.2)
    Path(directory, name).write_text(f"{start} {time.time()}")


def refuse(message: str) -> None:
    raise ConfigError(message)


def crash() -> None:
    raise ValueError("not a user's mistake")


def test_two_jobs_run_at_the_same_time_in_other_processes(tmp_path):
    log: list[str] = []
    run_side_by_side([("a", rendezvous, (str(tmp_path), "a", "b")), ("b", rendezvous, (str(tmp_path), "b", "a"))],
                     2, log.append)
    pids = {(tmp_path / name).read_text() for name in "ab"}
    assert len(pids) == 2 and str(os.getpid()) not in pids
    assert sorted(log) == ["a: finished (1 of 2)", "b: finished (2 of 2)"] or \
        sorted(log) == ["a: finished (2 of 2)", "b: finished (1 of 2)"]


def test_one_job_runs_the_calls_one_after_another_in_order(tmp_path):
    run_side_by_side([(name, record, (str(tmp_path), name)) for name in "abc"], 1, lambda _: None)
    spans = [tuple(map(float, (tmp_path / name).read_text().split())) for name in "abc"]
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))


def test_a_failure_stops_the_calls_not_started_and_names_its_call(tmp_path):
    calls = [("beside", record, (str(tmp_path), "beside")), ("bad run", refuse, ("training.lr must be positive",)),
             *[(name, record, (str(tmp_path), name)) for name in ("later1", "later2")]]
    with pytest.raises(ConfigError, match=r"^bad run: training.lr must be positive$"):
        run_side_by_side(calls, 2, lambda _: None)
    assert (tmp_path / "beside").exists()  # the one running beside it finished
    assert not (tmp_path / "later2").exists()


def test_an_unexpected_error_keeps_its_type():
    with pytest.raises(ValueError, match="not a user's mistake"):
        run_side_by_side([("x", crash, ())], 1, lambda _: None)


def test_job_counts_are_checked():
    with pytest.raises(ConfigError, match="--jobs must be at least 1, not 0"):
        check_jobs(0, 1, print)
    log: list[str] = []
    check_jobs(2, os.cpu_count() or 1, log.append)
    assert log and "slow each other down" in log[0]
    log.clear()
    check_jobs(1, 0, log.append)
    assert log == []
