"""How many CPU threads a process computes with: training, scoring and test-set translation alike."""
from __future__ import annotations

import torch

from ctxnmt.utils.cores import default_threads


def setup_threads(threads: int, processes: int = 1) -> None:
    """`threads` per process; 0: OMP_NUM_THREADS where it is set, else this machine's cores
    shared among its ranks."""
    torch.set_num_threads(threads or default_threads(processes))
