"""Data-parallel training on torch.distributed: who this process is, how an update's
batch is dealt to the ranks, and the few collectives the trainer needs.

A run is distributed when the environment says WORLD_SIZE > 1, as `ctxnmt train
--nproc N` (ctxnmt.training.launch) and torchrun both set it, with RANK, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT.  Every rank computes the same global batches (batch order
is a pure function of seed and epoch) and takes every size-th sentence of each: the
shares differ by one sentence at most and hold similar lengths.  A rank whose share is
empty (an update of fewer sentences than ranks) runs a dummy sentence with weight 0, so
that every rank joins every gradient all-reduce (fairseq's dummy batch).  Each rank's
summed loss is scaled by size / (the update's sentences), and DDP averages the ranks'
gradients: together the update's summed loss over its sentences, as in one process.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from ctxnmt.errors import CtxnmtError

# Collectives wait this long for a peer that is alive but silent (a peer that dies
# closes its sockets, and gloo fails at once); rank 0's validation must fit inside.
TIMEOUT = datetime.timedelta(minutes=30)
LAUNCHER_PID = "CTXNMT_LAUNCHER_PID"  # set by `ctxnmt train --nproc` for its children


class PeerFailure(CtxnmtError):
    """A collective failed: another rank died, was killed or cannot be reached."""


@dataclass
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    group: object = None  # gloo group for flags and objects (NCCL runs keep one beside the default)

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- dealing batches --------------------------------------------------------
    def share(self, index: list[int]) -> tuple[list[int], float]:
        """This rank's sentences of an update's batch and their loss weight (0 = dummy)."""
        mine = index[self.rank::self.size]
        return (mine, 1.0) if mine else (index[:1], 0.0)

    # -- collectives --------------------------------------------------------------
    def sum_step(self, values: list[float]) -> list[float]:
        """Element-wise sums over the ranks (float64, the same on every rank)."""
        if not self.distributed:
            return values
        totals = torch.tensor(values, dtype=torch.float64)
        with collective("summing an update's statistics"):
            dist.all_reduce(totals, group=self.group)
        return totals.tolist()

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank (also a barrier)."""
        if not self.distributed:
            return obj
        box = [obj]
        with collective("waiting for rank 0"):
            dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def gather(self, obj) -> list:
        """Every rank's `obj`, in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        out = [None] * self.size
        with collective("gathering RNG states"):
            dist.all_gather_object(out, obj, group=self.group)
        return out

    def barrier(self) -> None:
        if self.distributed:
            with collective("at a barrier"):
                dist.barrier(group=self.group)

    def close(self) -> None:
        """Leave the process group together: a rank that tears its connections down while
        another still uses them can make that one abort in gloo ("terminate called without
        an active exception"), seen in the test suite."""
        if self.distributed and dist.is_initialized():
            with contextlib.suppress(RuntimeError):  # a peer that already failed was reported elsewhere
                dist.barrier(group=self.group)
            dist.destroy_process_group()


@contextlib.contextmanager
def collective(doing: str) -> Iterator[None]:
    """Turns a failed collective into a one-line PeerFailure naming what this rank was doing."""
    try:
        yield
    except RuntimeError as err:  # gloo and NCCL raise RuntimeError (DistBackendError) subclasses
        raise peer_failure(err, doing) from None


def peer_failure(err: BaseException, doing: str) -> PeerFailure:
    rank = os.environ.get("RANK", "?")
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return PeerFailure(f"rank {rank}: a collective failed while {doing}; another rank has probably died or been "
                       f"killed (see its output) ({first[:200]})")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise CtxnmtError(f"environment variable {name} must be an integer, got {value!r}") from None


def world_from_env() -> World:
    size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    if size < 1 or not 0 <= rank < size:
        raise CtxnmtError(f"RANK={rank} does not fit WORLD_SIZE={size}")
    local_size = _env_int("LOCAL_WORLD_SIZE", size)
    return World(rank=rank, size=size, local_rank=_env_int("LOCAL_RANK", rank), local_size=local_size)


def init_world(device_type: str) -> World:
    """This process's place in the run; joins the process group when there are several ranks
    (gloo on CPU, NCCL on GPU, rendezvous through MASTER_ADDR:MASTER_PORT)."""
    world = world_from_env()
    if not world.distributed:
        return world
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name):
            raise CtxnmtError(f"WORLD_SIZE={world.size} but {name} is not set; start ranks with "
                              f"'ctxnmt train CONFIG --nproc N' or torchrun")
    backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl":  # GPU path: written for torchrun on GPU machines, not run on this CPU-only project
        torch.cuda.set_device(world.local_rank)
    try:
        dist.init_process_group(backend, timeout=TIMEOUT)
        world.group = dist.new_group(backend="gloo", timeout=TIMEOUT) if backend == "nccl" else dist.group.WORLD
    except (RuntimeError, ValueError) as err:
        raise peer_failure(err, f"joining the process group at {os.environ['MASTER_ADDR']}:"
                                f"{os.environ['MASTER_PORT']}") from None
    return world


def device_for(world: World, name: str) -> torch.device:
    """The configured device; on CUDA each local rank takes its own GPU."""
    device = torch.device(name)
    if device.type == "cuda" and world.distributed:
        return torch.device("cuda", world.local_rank)
    return device


def rank_seed(seed: int, rank: int) -> int:
    """Dropout stream of rank > 0 (rank 0 keeps the single-process stream of `seed`)."""
    return seed * 1_000_003 + 7919 * rank


# -- random number generators -------------------------------------------------------

def rng_state(device: torch.device) -> dict:
    """Every generator this process draws from: torch's CPU and CUDA ones, Python's, NumPy's."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached),
    }


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and state.get("cuda") is not None:
        torch.cuda.set_rng_state(state["cuda"], device)
    if state.get("python") is not None:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if state.get("numpy") is not None:
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
