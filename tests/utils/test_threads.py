"""training.threads: 0 takes OMP_NUM_THREADS where it is set (a machine shared with a training),
else the cores shared among the ranks; a number given is taken as it is."""
from __future__ import annotations

import os

import pytest
import torch

from ctxnmt.utils.threads import default_threads, setup_threads


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
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert default_threads() == 8
    assert default_threads(processes=3) == 2
    assert default_threads(processes=16) == 1
