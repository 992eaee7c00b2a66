"""CUDA graphs of the training step (`training.cuda_graphs`, ours).

At the papers' batch (80 sentences) a GPU waits on kernel launches: every decoder step
launches dozens of small kernels forward and backward, and the CPU that launches them,
not the GPU, sets the pace.  A CUDA graph records one step's forward and backward kernels
once and replays them with one launch.  A graph holds fixed shapes and addresses, so:

- each batch is padded up to a shape of a few sizes (rows, source and target lengths
  rounded up to multiples of `ROUND`), and each shape is captured once, at its first
  batch, into a memory pool that all shapes share (their replays never overlap);
- the loss is `NMTModel.padded_loss`, whose softmax also runs on padding, weighted 0,
  and the encoder's bi-GRU runs in its host-free form (functional.padded_bigru);
- the batch is copied into the graph's own input tensors, the loss's scale (which varies
  with the update's number of sentences) into a one-element tensor, and the gradients
  accumulate into `.grad` tensors that stay where they are (zeroed, not freed, between
  updates), which the optimiser, eager, then reads.

Rows added to fill a shape are one-token sources of PAD with no target: their loss and
gradients are zero.  The gradients equal the eager step's up to the order of floating
point sums (tests/training/test_graphs.py; tests/models/test_gpu_cuda.py on a GPU).
Dropout draws from the CUDA generator inside the graph, as PyTorch supports; the draws
differ from an eager run's, and exact resume holds only for runs without dropout.
A shape beyond `LIMIT` graphs trains eagerly.  A capture that fails is logged and tried
once more with the encoder's bi-GRU as a loop instead of cuDNN's RNN; failing again, it
turns the graphs off for the rest of the run (what failed once would fail again).  One device, sentence-level models, fp32 or bf16 (ctxnmt.config checks).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ctxnmt.data.batching import Batch
from ctxnmt.data.vocab import PAD
from ctxnmt.models import functional

ROUND = 16  # rows and lengths are padded up to multiples of this
LIMIT = 128  # graphs at most; a batch of another shape trains eagerly
WARMUP = 2  # eager passes on a side stream before a capture (cuBLAS and cuDNN set up their work spaces)


@dataclass(frozen=True)
class Shape:
    rows: int
    src_len: int
    tgt_len: int


def round_up(n: int, multiple: int = ROUND) -> int:
    return -(-n // multiple) * multiple


def padded_shape(batch: Batch) -> Shape:
    return Shape(round_up(batch.n_sents), round_up(batch.src.size(1)), round_up(batch.tgt.size(1)))


def pad_to(batch: Batch, shape: Shape) -> tuple[torch.Tensor, ...]:
    """(src, src_mask, tgt, tgt_mask) of `batch` (on the host) padded to `shape`; added rows
    have one source token (PAD, unmasked: an all-masked row's attention would divide by
    zero) and no target."""
    B, S = batch.src.shape
    T = batch.tgt.size(1)
    src = torch.full((shape.rows, shape.src_len), PAD, dtype=batch.src.dtype)
    src_mask = torch.zeros(shape.rows, shape.src_len, dtype=batch.src_mask.dtype)
    tgt = torch.full((shape.rows, shape.tgt_len), PAD, dtype=batch.tgt.dtype)
    tgt_mask = torch.zeros(shape.rows, shape.tgt_len, dtype=batch.tgt_mask.dtype)
    src[:B, :S], src_mask[:B, :S] = batch.src, batch.src_mask
    tgt[:B, :T], tgt_mask[:B, :T] = batch.tgt, batch.tgt_mask
    src_mask[B:, 0] = 1
    return src, src_mask, tgt, tgt_mask


class _Captured:
    """One shape's graph: its input tensors, the loss's scale, and the summed loss it leaves."""

    def __init__(self, graph: torch.cuda.CUDAGraph, inputs: tuple[torch.Tensor, ...], scale: torch.Tensor,
                 nll: torch.Tensor):
        self.graph, self.inputs, self.scale, self.nll = graph, inputs, scale, nll

    def run(self, host: tuple[torch.Tensor, ...], scale: float) -> torch.Tensor:
        for static, value in zip(self.inputs, host):
            static.copy_(value.pin_memory(), non_blocking=True)
        self.scale.fill_(scale)
        self.graph.replay()
        return self.nll


class GraphedSteps:
    """Forward and backward passes of training batches through CUDA graphs, one per padded shape.

    `autocast` makes the forward pass's precision context (autocast's cache off, which a
    graph needs); `log` takes one line."""

    def __init__(self, model, label_smoothing: float, autocast: Callable[[], contextlib.AbstractContextManager],
                 log: Callable[[str], None] = print):
        self.model, self.label_smoothing, self.autocast, self.log = model, label_smoothing, autocast, log
        self.device = next(model.parameters()).device
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.grads = [torch.zeros_like(p) for p in self.params]  # where every graph writes the gradients
        self.graphs: dict[Shape, _Captured | None] = {}  # None: this shape trains eagerly
        self.pool = None
        self._full_logged = False
        self.failed = False

    def zero_grad(self) -> None:
        """Zero the gradients in the tensors the graphs write into, and make them the
        parameters' `.grad` again (whatever set those to None meanwhile)."""
        for p, g in zip(self.params, self.grads):
            g.zero_()
            p.grad = g

    def forward_backward(self, batch: Batch, scale: float) -> torch.Tensor:
        """Add ∂(scale · loss)/∂θ of `batch` (on the host) into the gradients; the summed loss
        (a device scalar).  Call `zero_grad` first, once per update."""
        shape = padded_shape(batch)
        host = pad_to(batch, shape)
        captured = self._graph(shape, host)
        if captured is not None:
            return captured.run(host, scale)
        return self._pass([t.to(self.device, non_blocking=True) for t in host], scale).detach()

    def _pass(self, inputs, scale) -> torch.Tensor:
        """One forward and backward pass of the padded loss (eager, a warm-up, or captured)."""
        with self.autocast():
            nll = self.model.padded_loss(*inputs, self.label_smoothing)
        (nll * scale).backward()
        return nll

    def _graph(self, shape: Shape, host: tuple[torch.Tensor, ...]) -> _Captured | None:
        if self.failed:
            return None
        if shape not in self.graphs:
            if len(self.graphs) >= LIMIT:
                if not self._full_logged:
                    self.log(f"CUDA graphs: {LIMIT} shapes captured; batches of other shapes train without a graph")
                    self._full_logged = True
                return None
            self.graphs[shape] = self._try_capture(shape, host)
        return self.graphs[shape]

    def _try_capture(self, shape: Shape, host: tuple[torch.Tensor, ...]) -> _Captured | None:
        """The shape's graph; where CUDA refuses it, once more with the encoder's bi-GRU as a
        loop instead of cuDNN's RNN, then no more graphs for this run."""
        for attempt in ("with cuDNN's RNN", "with the bi-GRU as a loop"):
            try:
                return self._capture(shape, host)
            except (RuntimeError, AssertionError) as err:  # what CUDA refused to capture trains eagerly
                message = str(err).splitlines()[0] if str(err) else ""
                self.log(f"CUDA graphs: capturing the shape {shape.rows}×{shape.src_len}→{shape.tgt_len} "
                         f"{attempt} failed ({type(err).__name__}: {message})")
                torch.cuda.synchronize(self.device)
                self.zero_grad()
                self.pool = None  # a failed capture can leave its pool marked as still recording
                functional.cudnn_in_graphs(False)
        self.failed = True
        self.log("CUDA graphs: training goes on without graphs")
        return None

    def _capture(self, shape: Shape, host: tuple[torch.Tensor, ...]) -> _Captured:
        inputs = tuple(t.to(self.device) for t in host)
        scale = torch.ones((), device=self.device)
        for p, g in zip(self.params, self.grads):
            p.grad = g
        saved = [g.clone() for g in self.grads]  # this update's gradients so far (zero, as a rule)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                self._pass(inputs, scale)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self.pool):
            nll = self._pass(inputs, scale)
        for g, before in zip(self.grads, saved):  # the warm-up passes' gradients go
            g.copy_(before)
        if not self.graphs:  # the first capture
            self.log(f"CUDA graphs: each batch shape (rows and lengths rounded up to {ROUND}) is captured at its "
                     f"first batch, {LIMIT} at most")
        return _Captured(graph, inputs, scale, nll.detach())

    @property
    def captured(self) -> int:
        return sum(1 for g in self.graphs.values() if g is not None)


__all__ = ["GraphedSteps", "Shape", "pad_to", "padded_shape", "round_up", "LIMIT", "ROUND"]
