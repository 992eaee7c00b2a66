"""How many CPU threads a process computes with: training, scoring and test-set translation alike."""
from __future__ import annotations

import os

import torch


def setup_threads(threads: int, processes: int = 1) -> None:
    """`threads` per process; 0: OMP_NUM_THREADS where it is set, else this machine's cores
    shared among its ranks."""
    torch.set_num_threads(threads or default_threads(processes))


def default_threads(processes: int = 1) -> int:
    """OMP_NUM_THREADS where it is a positive number (PyTorch's own default, and what a user who
    shares the machine sets), else the cores ÷ `processes`.  More threads than free cores make
    each step wait for the starved one (a test run beside a training crawled)."""
    asked = os.environ.get("OMP_NUM_THREADS", "").strip()
    if asked.isdigit() and int(asked) > 0:
        return int(asked)
    return max(1, (os.cpu_count() or 1) // processes)
