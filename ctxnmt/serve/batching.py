"""Dynamic batching: requests that arrive together are decoded as one batched beam search.

One worker thread takes the first waiting request, then keeps taking requests until the
batch holds `max_batch_sents` sentences or `max_wait_ms` have passed since the first, and
decodes them together (itself, or through the processes of `serve --workers`:
processes.py).  While it decodes, new requests queue up, so the batches grow with the load:
under one client a request waits at most `max_wait_ms`; under many, one beam search serves
many clients.  `max_batch_sents` = 1 turns batching off.

A request whose client has gone (its future cancelled before the batch starts) is left
out; one cancelled after is decoded and its result dropped: neither touches the others.
"""
from __future__ import annotations

import collections
import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from ctxnmt.serve.settings import MAX_BATCH_SENTS, MAX_WAIT_MS

_STOP = object()
RECENT_BATCHES = 1000  # sizes of the latest decoded batches kept for inspection


@dataclass
class Job:
    """One request's sentences and settings; `future` receives its list of results."""
    lines: list[str]
    beam: int
    nbest: int = 1
    attention: bool = False
    document: bool = False
    length: tuple = ()  # (option, value) pairs of the length options replacing the config's, sorted
    future: Future = field(default_factory=Future)


@dataclass
class Batch:
    """What the decode function gets: jobs that share beam, n-best and length options, decoded together."""
    number: int
    jobs: list[Job]

    @property
    def sentences(self) -> int:
        return sum(len(j.lines) for j in self.jobs)


class DynamicBatcher:
    def __init__(self, decode: Callable[[Batch], list[list]], max_batch_sents: int = MAX_BATCH_SENTS,
                 max_wait_ms: float = MAX_WAIT_MS):
        """`decode(batch)` returns one list of results per job of the batch, in order."""
        if max_batch_sents < 1:
            raise ValueError(f"max_batch_sents must be at least 1, not {max_batch_sents}")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must not be negative, not {max_wait_ms}")
        self.decode = decode
        self.max_batch_sents, self.max_wait = max_batch_sents, max_wait_ms / 1000.0
        self._queue: queue.Queue = queue.Queue()
        self._held: Job | None = None  # a job that did not fit the batch just closed
        self._numbers = itertools.count(1)
        self._thread = threading.Thread(target=self._run, name="ctxnmt-batcher", daemon=True)
        # /health reports a count; only the latest sizes are kept, so a long-running server's
        # memory does not grow with every batch it decodes.
        self.batches_decoded = 0
        self.recent_batch_sizes: collections.deque[int] = collections.deque(maxlen=RECENT_BATCHES)

    def start(self) -> DynamicBatcher:
        self._thread.start()
        return self

    def submit(self, job: Job) -> Future:
        self._queue.put(job)
        return job.future

    def stop(self, timeout: float | None = None) -> None:
        """Decode everything already submitted, then end the worker."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    # -- the worker -------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            jobs, stop = self._collect()
            for group in _by_settings([j for j in jobs if j.future.set_running_or_notify_cancel()]):
                self._decode(Batch(next(self._numbers), group))
            if stop:
                return

    def _collect(self) -> tuple[list[Job], bool]:
        """The next batch's jobs, and whether a stop was seen."""
        first = self._held if self._held is not None else self._queue.get()
        self._held = None
        if first is _STOP:
            return [], True
        jobs, size = [first], len(first.lines)
        deadline = time.monotonic() + self.max_wait
        while size < self.max_batch_sents:
            try:
                job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is _STOP:
                self._held = job
                break
            if size + len(job.lines) > self.max_batch_sents:
                self._held = job  # starts the next batch; the batch stays within the limit
                break
            jobs.append(job)
            size += len(job.lines)
        return jobs, False

    def _decode(self, batch: Batch) -> None:
        try:
            results = self.decode(batch)
        except Exception as err:  # the batch's clients get the error; the worker goes on
            for job in batch.jobs:
                job.future.set_exception(err)
            return
        self.batches_decoded += 1
        self.recent_batch_sizes.append(batch.sentences)
        for job, result in zip(batch.jobs, results):
            job.future.set_result(result)


def _by_settings(jobs: list[Job]) -> list[list[Job]]:
    """Jobs grouped by (beam, n-best, length options), which one beam search must share, in arrival order."""
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        groups.setdefault((job.beam, job.nbest, job.length), []).append(job)
    return list(groups.values())
