"""`ctxnmt train CONFIG --nproc N`: N local ranks of one data-parallel run.

The launcher prepares the data once, picks a free port on 127.0.0.1 for the
rendezvous, and starts N `python -m ctxnmt train` processes with the environment
torchrun would give them (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
It passes SIGINT and SIGTERM on to every rank (each then saves at the next update
boundary) and watches them: when a rank fails, the others normally fail at their next
collective within seconds; any still running after GRACE seconds are killed, so a run
never hangs.  Its exit status is the first failing rank's (0 when all succeed).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from ctxnmt.training.distributed import LAUNCHER_PID
from ctxnmt.utils.messages import to_stderr
from ctxnmt.utils.preemption import SIGNALS

GRACE = 30.0  # seconds the other ranks get to fail on their own after one rank failed


def free_port() -> int:
    """A port nobody listens on now (rank 0 binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_env(rank: int, nproc: int, port: int) -> dict[str, str]:
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
               LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               **{LAUNCHER_PID: str(os.getpid())})
    if "GLOO_SOCKET_IFNAME" not in env and any(name == "lo" for _, name in socket.if_nameindex()):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # one machine: gloo's connections stay on the loopback interface
    return env


def exit_status(code: int) -> int:
    """A shell-style status: 128 + N for a process ended by signal N."""
    return 128 - code if code < 0 else code


def launch(train_args: list[str], nproc: int) -> int:
    """Run `ctxnmt train *train_args` as ranks 0 … nproc − 1 and wait for them."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "ctxnmt", "train", *train_args], env=rank_env(r, nproc, port))
             for r in range(nproc)]
    previous = {sig: signal.signal(sig, lambda signum, frame: _pass_on(procs, signum)) for sig in SIGNALS}
    try:
        return _watch(procs)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for proc in procs:  # only if the launcher itself is interrupted by an error
            if proc.poll() is None:
                proc.kill()


def _pass_on(procs: list[subprocess.Popen], signum: int) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signum)


def _watch(procs: list[subprocess.Popen]) -> int:
    first_failure: tuple[int, int] | None = None  # (rank, status)
    deadline = None
    while True:
        codes = [proc.poll() for proc in procs]
        for rank, code in enumerate(codes):
            if code not in (None, 0) and first_failure is None:
                first_failure = (rank, exit_status(code))
                deadline = time.monotonic() + GRACE
                if code < 0:  # it could not say so itself
                    to_stderr(f"ctxnmt train: rank {rank} was killed by {signal.Signals(-code).name}")
        if all(code is not None for code in codes):
            return first_failure[1] if first_failure else 0
        if deadline is not None and time.monotonic() > deadline:
            rank, status = first_failure
            to_stderr(f"ctxnmt train: rank {rank} failed (exit status {status}) and ranks "
                      f"{[r for r, c in enumerate(codes) if c is None]} were still running {GRACE:.0f} s later: "
                      f"killing them")
            _pass_on(procs, signal.SIGKILL)
            for proc in procs:
                proc.wait()
            return status
        time.sleep(0.1)
