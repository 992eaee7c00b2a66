"""`serve --workers N`: each batch's requests dealt among N decoding processes of one
intra-op thread each, forked at start-up.

A search's Python bookkeeping and operator dispatch hold the interpreter's lock for a good
part of each step, and in the server they shared it with the HTTP loop; threads of one
process would share it with each other as well (docs/speed-log.md).  Forked processes share
nothing but the weights, which the fork copies only where written.  They are forked before
the server starts a thread, since a fork copies only the calling thread and a lock another
thread held would stay held in the child.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import pickle
import signal
import threading
from collections.abc import Callable

import torch

from ctxnmt.decoding.workers import may_fork, shares
from ctxnmt.errors import CtxnmtError
from ctxnmt.serve.batching import Batch


class DecodingProcesses:
    """Decodes a Batch as `decode` would, its jobs dealt among `workers` forked processes."""

    def __init__(self, decode: Callable[[Batch], list], workers: int):
        if not may_fork():
            raise CtxnmtError(f"--workers {workers}: decoding processes are forked before the server starts a "
                              f"thread, and this process has {threading.active_count()} (or cannot fork)")
        context = multiprocessing.get_context("fork")
        self._pipes, self._processes = [], []
        for w in range(workers):
            ours, theirs = context.Pipe()
            process = context.Process(target=_serve_batches, args=(decode, theirs, ours), daemon=True,
                                      name=f"ctxnmt-decoder-{w}")
            process.start()
            theirs.close()
            self._pipes.append(ours)
            self._processes.append(process)

    def __call__(self, batch: Batch) -> list:
        """One result per job, in order; the first failure raised once every process has answered,
        so that no answer is left in a pipe for the next batch to read."""
        dealt = deal(batch.jobs, len(self._pipes))
        sent = [w for w, share in enumerate(dealt) if share and self._send(w, batch, share)]
        results: list = [None] * len(batch.jobs)
        failures = [self._gone(w) for w, share in enumerate(dealt) if share and w not in sent]
        for w in sent:
            ok, answer = self._receive(w)
            if not ok:
                failures.append(answer)
                continue
            for j, result in zip(dealt[w], answer):
                results[j] = {**result, "batch": {"number": batch.number, "sentences": batch.sentences}}
        if failures:
            raise failures[0]
        return results

    def _send(self, w: int, batch: Batch, share: list[int]) -> bool:
        if not self._processes[w].is_alive():
            return False
        try:
            self._pipes[w].send(Batch(batch.number, [dataclasses.replace(batch.jobs[j], future=None) for j in share]))
        except OSError:  # it died just now
            return False
        return True

    def _receive(self, w: int) -> tuple[bool, object]:
        try:
            return self._pipes[w].recv()
        except EOFError:
            return False, self._gone(w)

    def _gone(self, w: int) -> CtxnmtError:
        self._processes[w].join(1)
        return CtxnmtError(f"decoding process {w} exited (status {self._processes[w].exitcode}); restart the server")

    def problem(self) -> str | None:
        """What keeps these processes from decoding (for /health), or None."""
        gone = [w for w, process in enumerate(self._processes) if not process.is_alive()]
        return str(self._gone(gone[0])) if gone else None

    def close(self) -> None:
        for pipe in self._pipes:
            try:
                pipe.send(None)
            except OSError:  # that process has gone already
                pass
        for process in self._processes:
            process.join(10)


def deal(jobs: list, workers: int) -> list[list[int]]:
    """The jobs' indices dealt among `workers` (decoding.workers' `shares`, by characters), each
    share in arrival order; a worker left without a job gets an empty share."""
    dealt = shares(list(range(len(jobs))), workers, lambda j: sum(map(len, jobs[j].lines)))
    return [sorted(share) for share in dealt] + [[] for _ in range(workers - len(dealt))]


def _serve_batches(decode: Callable[[Batch], list], pipe, parents_end) -> None:
    """A decoding process: batches in, ("ok", results) or ("error", exception) out, until None."""
    parents_end.close()
    # Ctrl-C reaches the terminal's whole process group: the server stops, and the pipe's end ends this one
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    while True:
        try:
            batch = pipe.recv()
        except EOFError:  # the server has gone
            return
        if batch is None:
            return
        try:
            pipe.send((True, decode(batch)))
        except Exception as err:  # the batch's clients get the error; the process goes on
            pipe.send((False, _picklable(err)))


def _picklable(err: Exception) -> Exception:
    """`err` if it pickles (most do), else its class name and message in a CtxnmtError."""
    try:
        pickle.dumps(err)
        return err
    except Exception:
        return CtxnmtError(f"{type(err).__name__}: {err}")
