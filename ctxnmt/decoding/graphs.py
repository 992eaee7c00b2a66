"""CUDA graphs of the search step (`decoding.cuda_graphs`, ours).

Beam search at the papers' size waits on the host: each step launches some fifty small
kernels (the decoder's cells, attention, the output layer and its top-k), and the GPU idles
between them.  `GraphedSearch` wraps any `Searchable` and runs its `step_candidates` from
a CUDA graph, one launch per step; encoding, the first step and search's bookkeeping stay
eager.  A graph holds fixed shapes and addresses, so:

- a step's sentences are padded up to a multiple of `ROUND_SENTS` (their K hypotheses
  each) and its source positions up to a multiple of `ROUND_WIDTH`; each shape, with the
  state's layout, is captured once, into one memory pool shared by all;
- the step's inputs (the encoder side, the decoder state, the words just chosen) are
  copied into the graph's own tensors: the decoder state and words at every step, the
  encoder side only when search hands over another one (when sentences leave, and at each
  batch); padding rows keep whatever rows they held (finite values of earlier steps), and
  padding positions are zeros, as `State.concat` pads them (masked: zero attention);
- outputs are copied out of the graph's tensors for the real rows and positions.

A padded row's arithmetic is its own (rows do not mix), so outputs equal the eager step's
up to the order of floating-point sums (tests/decoding/test_graphs.py on the CPU with a
stand-in for the capture; tests/models/test_gpu_cuda.py on a GPU).  The graphs read the
model's weights where they lie: a change of any weight (an optimiser step between
validations, a checkpoint load) drops them at the next batch.  A state whose layout
changes from step to step (target-context summaries that grow with t) would need a graph
per step, so such a search runs eagerly.  A capture that fails turns the graphs off for
that model, with a warning.  Beyond `LIMIT` graphs the least recently used goes.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable

import torch

from ctxnmt.decoding.searchable import Searchable
from ctxnmt.models.state import Kind, State
from ctxnmt.utils.messages import warn

ROUND_SENTS = 8  # sentences of a step, padded up to a multiple of this
ROUND_WIDTH = 16  # source positions, likewise
# Graphs kept at most.  Each holds its own padded copy of an encoder side: at the papers' size
# and 104 sentences of 80 positions some 200 MB, so 32 of them stay within a few GB.
LIMIT = 32
WARMUP = 2  # eager runs on a side stream before a capture (cuBLAS sets up its work space)

def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _entries(state: State):
    """(kind, tensor) of every entry of `state` and its parts, in a fixed order."""
    for name in state:
        yield state.kind(name), state[name]
    for part in state.parts.values():
        yield from _entries(part)


def _layout(state: State) -> tuple:
    """What a graph fixes of a state besides its rows and source positions."""
    def shape(kind, value):
        return tuple(value.shape) if kind is Kind.SHARED else tuple(value.shape[1 + (kind is Kind.POSITIONS):])
    return tuple((kind, value.dtype, shape(kind, value)) for kind, value in _entries(state))


def _width(state: State) -> int:
    return next((value.size(1) for kind, value in _entries(state) if kind is Kind.POSITIONS), 0)


def _padded(state: State, rows: int, width: int) -> State:
    """`state` with its first row repeated up to `rows` rows and source positions padded
    with zeros up to `width`: the inputs a graph is captured with (shared entries copied,
    since loads write into them)."""
    index = torch.zeros(rows, dtype=torch.long, device=next(v for _, v in _entries(state)).device)
    index[:state.batch_size()] = torch.arange(state.batch_size(), device=index.device)
    return state.select(index).pad(width).map(lambda kind, v: v.clone() if kind is Kind.SHARED else v)


def _load(static: State, state: State) -> None:
    """Copy `state` into the first rows and positions of `static` (a graph's inputs);
    positions beyond `state`'s become zeros."""
    for (kind, into), (_, value) in zip(_entries(static), _entries(state)):
        if kind is Kind.SHARED:
            into.copy_(value)
        elif kind is Kind.ROW:
            into[:value.size(0)].copy_(value)
        else:
            width = value.size(1)
            into[:value.size(0), :width].copy_(value)
            into[:, width:].zero_()


def _read(static: State, rows: int, width: int) -> State:
    """The first `rows` rows and `width` positions of a graph's output state, copied out."""
    def cut(kind, value):
        if kind is not Kind.SHARED:
            value = value[:rows, :width] if kind is Kind.POSITIONS else value[:rows]
        return value.clone()
    return static.map(cut)


def cuda_capture(run: Callable[[], tuple], pool=None) -> tuple[Callable[[], None], tuple, object]:
    """Capture `run` (which reads and writes only fixed tensors) in a CUDA graph: its replay,
    the tensors `run` returned (which each replay rewrites) and the memory pool.  Under
    autocast the casts are not cached: a cached cast would live in the graph's pool only
    until autocast's cache is cleared."""
    cast = torch.is_autocast_enabled("cuda")
    dtype = torch.get_autocast_dtype("cuda") if cast else None
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.autocast("cuda", dtype=dtype, enabled=cast, cache_enabled=False):
        for _ in range(WARMUP):
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool), torch.autocast("cuda", dtype=dtype, enabled=cast, cache_enabled=False):
        outputs = run()
    return graph.replay, outputs, graph.pool()


class _Unsteady(Exception):
    """The step's state comes out with another layout than it went in (it grows with t)."""


class _StepGraph:
    """One shape's graph: its input tensors, its output tensors, and the encoder side last
    copied in (so that an unchanged one is not copied again)."""

    def __init__(self, enc: State, state: State, prev: torch.Tensor, k: int, model: Searchable, capture, pool):
        self.enc, self.state, self.prev, self.loaded = enc, state, prev, None
        produced = {}

        def step():
            logp, tokens, new_state, alpha = model.step_candidates(self.enc, self.state, self.prev, k)
            produced["state"] = new_state  # its declarations; the values are the graph's outputs below
            return (logp, tokens, alpha, *[value for _, value in _entries(new_state)])
        self.replay, outputs, self.pool = capture(step, pool)
        self.logp, self.tokens, self.alpha = outputs[:3]
        values = iter(outputs[3:])  # in `_entries` order, which `map` follows
        self.new_state = produced["state"].map(lambda kind, value: next(values))
        if _layout(self.new_state) != _layout(state):
            raise _Unsteady

    def run(self, enc: State, state: State, prev: torch.Tensor, width: int):
        """The step for `state` and `prev` over `enc` (of `width` source positions)."""
        if self.loaded is not enc:
            _load(self.enc, enc)
            self.loaded = enc
        _load(self.state, state)
        self.prev[:prev.size(0)].copy_(prev)
        self.replay()
        rows = state.batch_size()
        return (self.logp[:rows].clone(), self.tokens[:rows].clone(), _read(self.new_state, rows, width),
                self.alpha[:rows, :width].clone())


def _weights_key(model) -> tuple:
    parameters = model.parameters() if isinstance(model, torch.nn.Module) else ()
    return tuple((p.data_ptr(), p._version) for p in parameters)


class GraphedSearch:
    """`model` (a Searchable) with `step_candidates` replayed from CUDA graphs; a Searchable
    itself.  `capture` stands in for `cuda_capture` in tests on the CPU."""

    def __init__(self, model: Searchable, capture: Callable = cuda_capture):
        self.model, self.capture = model, capture
        self.graphs: OrderedDict[tuple, _StepGraph] = OrderedDict()
        self.pool, self.on, self.weights = None, True, _weights_key(model)
        self.captured = 0  # graphs captured so far (benchmarks report it)
        # the encoder side of the last step, and its sentences, width and layout: it changes only
        # when sentences leave or a batch starts, so its part of a step's key is kept
        self.enc: State | None = None
        self.enc_key: tuple = ()

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def encoding_reads_target(self) -> bool:
        return self.model.encoding_reads_target

    def encode(self, src, src_mask, context=None, beam: int = 1, signals: bool = False, ahead=None) -> State:
        weights = _weights_key(self.model)
        if weights != self.weights:  # the graphs read the old weights' memory
            self.graphs.clear()
            self.weights = weights
        if ahead is not None:
            return self.model.encode(src, src_mask, context, beam, signals, ahead=ahead)
        return self.model.encode(src, src_mask, context, beam, signals)

    def recorded(self, state: State) -> State | None:
        return self.model.recorded(state)

    def signals(self, enc: State, record: State | None, rows: torch.Tensor, beam: int) -> list[dict]:
        return self.model.signals(enc, record, rows, beam)

    def memory_lengths(self, enc: State) -> list[int] | None:
        return self.model.memory_lengths(enc)

    def init_state(self, enc: State, beam: int = 1) -> State:
        return self.model.init_state(enc, beam)

    def step(self, enc, state, prev_tokens):
        return self.model.step(enc, state, prev_tokens)

    def step_candidates_with_end(self, enc, state, prev_tokens, k: int):
        return self.model.step_candidates_with_end(enc, state, prev_tokens, k)

    def step_candidates(self, enc: State, state: State, prev_tokens: torch.Tensor | None, k: int):
        if not self.on or prev_tokens is None:  # the first step reads no previous word: eager
            return self.model.step_candidates(enc, state, prev_tokens, k)
        if enc is not self.enc:
            self.enc, self.enc_key = enc, (enc.batch_size(), _width(enc), _layout(enc))
        sentences, width, enc_layout = self.enc_key
        beam = state.batch_size() // sentences
        padded = round_up(sentences, ROUND_SENTS)
        key = (padded, round_up(width, ROUND_WIDTH), beam, k, enc_layout, _layout(state))
        graph = self.graphs.get(key)
        if graph is None:
            graph = self._new(key, enc, state, prev_tokens, k)
            if graph is None:
                return self.model.step_candidates(enc, state, prev_tokens, k)
        self.graphs.move_to_end(key)
        return graph.run(enc, state, prev_tokens, width)

    def _new(self, key, enc: State, state: State, prev: torch.Tensor, k: int) -> _StepGraph | None:
        padded, width, beam = key[:3]
        try:
            graph = _StepGraph(_padded(enc, padded, width), _padded(state, padded * beam, width),
                               torch.cat([prev, prev.new_zeros(padded * beam - prev.size(0))]), k, self.model,
                               self.capture, self.pool)
        except _Unsteady:  # a graph per step would cost more than it saves
            self.on = False
            return None
        except Exception as err:  # noqa: BLE001 - any capture failure: search goes on eagerly
            warn(f"decoding.cuda_graphs: capturing the search step failed ({type(err).__name__}: {err}); "
                 f"searching without graphs")
            self.on = False
            return None
        self.pool = graph.pool
        self.graphs[key] = graph
        self.captured += 1
        if len(self.graphs) > LIMIT:
            self.graphs.popitem(last=False)
        return graph


_WRAPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def graphed(model: Searchable) -> GraphedSearch:
    """The one GraphedSearch of `model` (its graphs serve every later search)."""
    if model not in _WRAPPED:
        _WRAPPED[model] = GraphedSearch(model)
    return _WRAPPED[model]
