"""training.threads: 0 takes OMP_NUM_THREADS where it is set (a machine shared with a training),
else the cores shared among the ranks; a number given is taken as it is.  Where other processes
keep the cores busy, the console script has OpenMP's threads wait passively (docs/speed.md)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from ctxnmt.utils import cores
from ctxnmt.utils.cores import default_threads
from ctxnmt.utils.threads import setup_threads


@pytest.fixture(autouse=True)
def kept_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_zero_takes_omp_num_threads_where_it_is_set(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    setup_threads(0)
    assert torch.get_num_threads() == 1
    setup_threads(2)  # a number given wins
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("value", [None, "", "0", "two"])
def test_without_a_usable_omp_num_threads_the_cores_are_shared_among_the_ranks(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert default_threads() == 8
    assert default_threads(processes=3) == 2
    assert default_threads(processes=16) == 1


def test_the_cores_are_those_the_process_may_run_on(monkeypatch):
    """A process pinned to 2 of 8 cores (taskset, a container's cpuset) runs 2 threads, not 8."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 5})
    assert default_threads() == 2
    monkeypatch.delattr(os, "sched_getaffinity")  # a system that keeps no affinity: every core
    assert default_threads() == 8


# -- how threads wait on a busy machine ---------------------------------------------------------

QUIET = {"PATH": "/usr/bin"}  # an environment that chooses neither threads nor how they wait


@pytest.mark.parametrize("load, count, environ, policy", [
    (2.0, 2, QUIET, "PASSIVE"),  # two trainings on 2 cores: our 2 threads would share both
    (1.0, 2, QUIET, "PASSIVE"),  # one training: one of our threads shares its core
    (0.3, 2, QUIET, None),  # the cores are free: spinning is fastest
    (1.0, 4, {"OMP_NUM_THREADS": "2"}, None),  # 2 threads fit on the 3 free cores
    (3.0, 4, {"OMP_NUM_THREADS": "2"}, "PASSIVE"),
    (2.0, 2, {"OMP_NUM_THREADS": "1"}, None),  # one thread never waits for another
    (2.0, 2, {"OMP_WAIT_POLICY": "ACTIVE"}, None),  # the user chose how threads wait
    (2.0, 2, {"GOMP_SPINCOUNT": "1000"}, None),
    (2.0, 2, {"KMP_BLOCKTIME": "0"}, None),
])
def test_threads_wait_passively_only_where_they_would_share_a_busy_core(monkeypatch, load, count, environ,
                                                                         policy):
    monkeypatch.setattr(os, "cpu_count", lambda: count)
    assert cores.busy_wait_policy(load, count, environ) == policy


@pytest.mark.parametrize("text, busy", [
    ("2.95 2.58 2.33 3/83 20456", 2.0),  # two trainings running, and this process
    ("2.95 2.58 2.33 1/83 20456", 0.0),  # the trainings just ended: the average lags behind
    ("0.10 0.20 0.30 4/83 20456", 0.10),  # passing processes, a quiet minute
    ("garbage", None),
])
def test_busy_cores_are_the_smaller_of_the_load_average_and_the_tasks_running_now(monkeypatch, tmp_path, text,
                                                                                   busy):
    (tmp_path / "loadavg").write_text(text + "\n")
    monkeypatch.setattr(cores, "LOADAVG", tmp_path / "loadavg")
    assert cores.busy_cores() == busy


def test_the_console_script_sets_the_policy_before_torch_loads(tmp_path):
    """`ctxnmt …` as a process of its own chooses the policy before the chosen command's module
    imports torch: OpenMP reads it once, as torch loads."""
    (tmp_path / "loadavg").write_text("2.00 2.00 2.00 3/83 1\n")
    script = (
        "import os, pathlib, sys\n"
        "import ctxnmt.cli as cli, ctxnmt.utils.cores as cores\n"
        f"cores.LOADAVG = pathlib.Path({str(tmp_path / 'loadavg')!r})\n"
        "os.sched_getaffinity = lambda pid: {0, 1}\n"
        "os.cpu_count = lambda: 2\n"
        "torch_then = []\n"
        "def spy():\n"
        "    torch_then.append('torch' in sys.modules)\n"
        "    return cores.wait_passively_when_busy()\n"
        "cli.wait_passively_when_busy = spy\n"
        "sys.argv = ['ctxnmt', 'translate', '--help']\n"
        "try:\n"
        "    cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(torch_then, os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k not in cores.WAIT_SETTINGS and k != "OMP_NUM_THREADS"}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert run.stdout.strip().splitlines()[-1] == "[False] PASSIVE True"  # chosen, then torch loaded


def test_a_call_of_main_from_python_leaves_the_environment_alone(monkeypatch, capsys):
    from ctxnmt import cli

    called = []
    monkeypatch.setattr(cli, "wait_passively_when_busy", lambda: called.append(True))
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert called == []
