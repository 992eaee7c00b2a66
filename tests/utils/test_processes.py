"""Trainings side by side: calls really run at once in processes of their own, at most
`jobs` of them, in order; a failure stops what has not started and names its call; a
dead worker and a signal to the parent leave no process behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctxnmt.errors import ConfigError, CtxnmtError
from ctxnmt.utils.preemption import Preempted
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


def preempted() -> None:
    raise Preempted("stopped on SIGTERM after saving last.pt", signal.SIGTERM)  # not picklable as such


def die() -> None:
    os._exit(3)


def test_two_jobs_run_at_the_same_time_in_other_processes(tmp_path):
    log: list[str] = []
    run_side_by_side([("a", rendezvous, (str(tmp_path), "a", "b")), ("b", rendezvous, (str(tmp_path), "b", "a"))],
                     2, log.append)
    pids = {(tmp_path / name).read_text() for name in "ab"}
    assert len(pids) == 2 and str(os.getpid()) not in pids
    assert log[:2] == ["a: started", "b: started"]
    assert sorted(line.split(" (")[0] for line in log[2:]) == ["a: finished", "b: finished"]


def test_one_job_runs_the_calls_one_after_another_in_order(tmp_path):
    run_side_by_side([(name, record, (str(tmp_path), name)) for name in "abc"], 1, lambda _: None)
    spans = [tuple(map(float, (tmp_path / name).read_text().split())) for name in "abc"]
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))


def test_a_failure_stops_the_calls_not_started_and_names_its_call(tmp_path):
    calls = [("beside", record, (str(tmp_path), "beside")), ("bad run", refuse, ("training.lr must be positive",)),
             *[(name, record, (str(tmp_path), name)) for name in ("later1", "later2")]]
    log: list[str] = []
    with pytest.raises(CtxnmtError, match=r"^bad run: training.lr must be positive$"):
        run_side_by_side(calls, 2, log.append)
    assert "bad run: failed: training.lr must be positive" in log  # said when it happens
    assert (tmp_path / "beside").exists()  # the one running beside it finished
    assert not (tmp_path / "later2").exists()


def test_an_unexpected_error_comes_back_with_its_traceback_and_run():
    with pytest.raises(RuntimeError, match="x failed in its process") as info:
        run_side_by_side([("x", crash, ())], 1, lambda _: None)
    assert "ValueError: not a user's mistake" in str(info.value) and "in crash" in str(info.value)


def test_a_preempted_run_keeps_its_exit_code():
    with pytest.raises(Preempted, match="^x: stopped on SIGTERM") as info:
        run_side_by_side([("x", preempted, ())], 1, lambda _: None)
    assert info.value.exit_code == 128 + signal.SIGTERM


def test_a_dead_worker_is_reported_with_its_run_and_stops_the_queue(tmp_path):
    log: list[str] = []
    with pytest.raises(CtxnmtError, match="^dies: its process died"):
        run_side_by_side([("dies", die, ()), ("later", record, (str(tmp_path), "later"))], 1, log.append)
    assert not (tmp_path / "later").exists()


def test_a_signal_to_the_parent_reaches_the_workers_and_leaves_none_behind(tmp_path):
    """`kill PID` of the command (a scheduler's SIGTERM): it must not leave its trainings running."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from ctxnmt.utils.processes import run_side_by_side
        from tests.utils.test_processes import sleeper
        if __name__ == "__main__":
            run_side_by_side([(n, sleeper, ({str(tmp_path)!r}, n)) for n in "ab"], 2, print)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"{n}.pid").exists() for n in "ab"):
            assert time.monotonic() < deadline and parent.poll() is None, parent.stderr.read()
            time.sleep(0.05)
        workers = [int((tmp_path / f"{n}.pid").read_text()) for n in "ab"]
        parent.send_signal(signal.SIGTERM)
        err = parent.communicate(timeout=60)[1].decode()
    finally:
        parent.kill()
    assert parent.returncode != 0 and "stopped by SIGTERM" in err
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def sleeper(directory: str, name: str) -> None:
    Path(directory, f"{name}.pid").write_text(str(os.getpid()))
    time.sleep(120)


def test_job_counts_are_checked():
    with pytest.raises(ConfigError, match="--jobs must be at least 1, not 0"):
        check_jobs(0, 1, print)
    log: list[str] = []
    check_jobs(2, os.cpu_count() or 1, log.append)
    assert log and "slow each other down" in log[0]
    log.clear()
    check_jobs(1, 0, log.append)
    assert log == []
