"""Searches side by side on the CPU (`decoding.workers`): one search's batches dealt among N
workers of one intra-op thread each.

On two cores two searches of one thread each ran faster than one search of two threads: a
step's products are too small to split well, and its bookkeeping is serial (docs/speed.md).
Workers are forked processes where the calling process has no other thread (`translate`),
else threads (the server, training's validation): a fork copies only the calling
thread, so a lock another thread holds would stay held in the child.  Threads share the
interpreter's lock, which a search's Python bookkeeping and operator dispatch hold for a
good part of each step; processes do not (docs/speed-log.md: int8 / float32 1.73 in two
processes against 1.53 in one of two threads).

A sentence model's batches are those of one search, so each sentence is searched as it would
be alone (in int8 too, whose input scales are a batch's), and the deal is fixed, whichever
worker runs first.  A model that reads its own previous translations has its documents dealt
instead, each worker searching its own wave by wave: a wave's batches then hold only that
worker's documents."""
from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import torch

from ctxnmt.models import kernels

Search = Callable[[list], dict]


def shares(items: list, workers: int, work: Callable[[object], int]) -> list[list]:
    """The items (batches, or documents) dealt among `workers` searches, the most work first, each
    to the search with the least so far."""
    loads, dealt = [0] * workers, [[] for _ in range(workers)]
    for item in sorted(items, key=lambda item: -work(item)):
        w = loads.index(min(loads))
        dealt[w].append(item)
        loads[w] += work(item)
    return [share for share in dealt if share]


def side_by_side(search: Search, dealt: list[list]) -> dict:
    """`search` over each share of batches, each in a worker of one intra-op thread; the
    union of what they found."""
    kernels.available()  # loaded once, before the workers race to load it (or fork without it)
    if may_fork():
        return _in_processes(search, dealt)
    return _in_threads(search, dealt)


def may_fork() -> bool:
    """Whether this process may fork its workers: it has no other thread, and the platform forks."""
    return threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods()


# -- processes ----------------------------------------------------------------------------

_DEAL: tuple[Search, list[list]] | None = None  # the search and shares under way, inherited by the fork


def _in_processes(search: Search, dealt: list[list]) -> dict:
    """A worker killed (out of memory, say) fails the search with BrokenProcessPool rather than
    leaving it waiting: the executor, unlike multiprocessing.Pool, notices a dead worker."""
    global _DEAL
    _DEAL = (search, dealt)
    found: dict = {}
    try:
        with ProcessPoolExecutor(len(dealt), mp_context=multiprocessing.get_context("fork"),
                                 initializer=torch.set_num_threads, initargs=(1,)) as pool:
            for part in pool.map(_search_share, range(len(dealt))):
                found.update(part)
    finally:
        _DEAL = None
    return found


def _search_share(w: int) -> dict:
    search, dealt = _DEAL
    return search(dealt[w])


# -- threads ------------------------------------------------------------------------------

def _in_threads(search: Search, dealt: list[list]) -> dict:
    found: dict = {}
    failed: list[BaseException] = []

    def work(share: list) -> None:
        try:
            found.update(search(share))
        except BaseException as err:  # raised in the caller's thread below
            failed.append(err)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pool = [threading.Thread(target=work, args=(share,), name=f"ctxnmt-search-{w}")
                for w, share in enumerate(dealt)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    finally:
        torch.set_num_threads(threads)
    if failed:
        raise failed[0]
    return found
