"""How many CPU threads a process computes with: training, scoring and test-set translation alike."""
from __future__ import annotations

import os

import torch


def setup_threads(threads: int, processes: int = 1) -> None:
    """`threads` per process; 0 shares the cores among this machine's ranks."""
    torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // processes))
