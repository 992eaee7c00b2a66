"""How many cores a process computes on, and how its threads wait where other processes keep
the cores busy.  Torch-free: the console script reads it before torch loads."""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# The variables by which a user chooses how OpenMP's threads wait (GNU's and Intel's runtimes).
WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
LOADAVG = Path("/proc/loadavg")


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system keeps one (what
    taskset or a container's cpuset narrows), else every core."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_threads(processes: int = 1, environ: Mapping[str, str] = os.environ) -> int:
    """OMP_NUM_THREADS where it is a positive number (PyTorch's own default, and what a user who
    shares the machine sets), else the usable cores ÷ `processes`.  More threads than free cores make
    each step wait for the starved one (a test run beside a training crawled)."""
    asked = environ.get("OMP_NUM_THREADS", "").strip()
    if asked.isdigit() and int(asked) > 0:
        return int(asked)
    return max(1, usable_cores() // processes)


def busy_wait_policy(load: float, cores: int, environ: Mapping[str, str] = os.environ) -> str | None:
    """The OpenMP wait policy for a process starting where other processes keep `load` of the
    `cores` busy: PASSIVE where its threads would share cores with them, else None (the
    runtime's default).  By default a thread that has done its part of a parallel region spins
    for a while before it sleeps: fastest on free cores, but on busy ones every region waits for
    a thread the scheduler has put aside while the others spin on the cores it needs (translation
    beside two trainings ran 2.6 times slower; docs/speed.md).  Never where the user chose how
    threads wait, or one thread."""
    if any(name in environ for name in WAIT_SETTINGS):
        return None
    threads = default_threads(environ=environ)
    return "PASSIVE" if threads > 1 and load + threads > cores + 0.5 else None


def busy_cores() -> float | None:
    """How many cores other processes keep busy now: the smaller of the last minute's load
    average and the tasks running this moment besides this one (Linux's /proc/loadavg).  The
    average alone lags a minute behind a training that just ended; the count alone catches a
    passing process.  None where the system does not say."""
    try:
        fields = LOADAVG.read_text().split()
        return max(0.0, min(float(fields[0]), int(fields[3].split("/")[0]) - 1))
    except (OSError, IndexError, ValueError):
        return None


def wait_passively_when_busy() -> str | None:
    """Sets OMP_WAIT_POLICY from `busy_wait_policy` where the machine is busy; it counts only
    before torch is first imported, which reads it.  Returns the policy set."""
    load = busy_cores()
    policy = busy_wait_policy(load, usable_cores()) if load is not None else None
    if policy:
        os.environ["OMP_WAIT_POLICY"] = policy
    return policy
