"""int8 matrix products for search on a CPU (`decoding.precision: int8`).

Dynamic quantisation (the form of torch.ao's quantize_dynamic, and of Marian's and
CTranslate2's int8 CPU decoding): a weight matrix is quantised once, symmetrically per
output row (scale max|w|/127); a product's input is quantised at each call with one scale
and zero point for the whole input, to 8 bits through oneDNN (whose VNNI / AMX products
accumulate straight into int32; 3-4x float32's rate at the search's shapes on the
Intel Xeon of docs/speed.md), to 7 bits where only fbgemm is built (its 8-bit multiply-add pairs could
saturate); products accumulate in int32 and return float32, with the bias added in
float32.  Gates, attention energies and weighted sums (products of two activations),
softmax and scores stay float32.  So do products of fewer multiply-adds per matrix than
`decoding.int8_from` (a million by default): quantising the input and calling the int8
kernel cost about 30 µs whatever the size, more than a product of a few rows by a small
matrix saves (docs/speed-log.md, 2026-12-01).

Inside `int8_products()` every nn.Linear of every component (so every architecture and
ensemble: `nn.Linear.forward` asks `serves` once this module has been used) and the products
that functional.py forms itself (the encoder's input terms, the recurrent and query products
of `step_product`, the output layer of `step_log_softmax` and `top_log_softmax`, through
`any_linear`, `product` and `linear`) take this path; outside it nothing changes.  A weight's int8 form
is made at its first use and kept on the tensor, made again if the tensor changes in place.
"""
from __future__ import annotations

import threading
import warnings
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

from ctxnmt.models.packed import kept

_state = threading.local()

# oneDNN where this torch has it (x86 and ARM builds), else the build's default engine
ENGINE = "onednn" if "onednn" in torch.backends.quantized.supported_engines else torch.backends.quantized.engine
INPUT_BITS = 8 if ENGINE == "onednn" else 7


def active() -> bool:
    """Whether the products of this thread run in int8 (inside `int8_products()`)."""
    return getattr(_state, "on", False)


def int8_from() -> int:
    """The fewest multiply-adds per matrix of an int8 product in this thread (decoding.int8_from)."""
    return getattr(_state, "int8_from", 0)


def serves(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether an int8 product serves x · weight (weight one matrix, or a stack of n): inside
    `int8_products()`, without autograd, both float32 on the CPU, and of at least the
    context's `int8_from()` multiply-adds per matrix."""
    if not (active() and not torch.is_grad_enabled() and x.device.type == "cpu"
            and x.dtype == torch.float32 and weight.dtype == torch.float32):
        return False
    n = weight.size(0) if weight.dim() == 3 else 1
    rows_per_matrix = x.numel() // x.size(-1) // n
    return rows_per_matrix * (weight.numel() // n) >= int8_from()


def any_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, in int8 where an int8 product serves it."""
    if weight.dim() == 2 and serves(x, weight):
        return linear(x, weight, bias)
    return F.linear(x, weight, bias)


def _linear_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return any_linear(x, self.weight, self.bias)


@contextmanager
def int8_products(fewest: int = 0):
    """Run this thread's matrix products in int8 (see the module docstring), those of fewer
    than `fewest` multiply-adds per matrix excepted: they stay float32 (decoding.int8_from)."""
    previous, engine = (active(), int8_from()), torch.backends.quantized.engine
    # Every nn.Linear's forward asks `serves` from now on: a thread outside this context gets
    # F.linear as before.  (A TorchFunctionMode routed F.linear instead, but it put every torch
    # call of the search through a Python method: slower than float32 in steps of few rows.)
    nn.Linear.forward = _linear_forward
    _state.on, _state.int8_from = True, fewest
    torch.backends.quantized.engine = ENGINE  # the packs are the engine's own
    try:
        yield
    finally:
        _state.on, _state.int8_from = previous
        torch.backends.quantized.engine = engine


def _pack(weight: torch.Tensor, bias: torch.Tensor | None):
    """fbgemm's packed form of weight (out, in), quantised per output row, with its bias."""
    w = weight.detach().contiguous()
    scale = (w.abs().amax(dim=1).clamp_min(1e-12) / 127).double()
    with warnings.catch_warnings():  # torch marks its quantised tensor types as deprecated
        warnings.simplefilter("ignore")
        q = torch.quantize_per_channel(w, scale, torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(q, None if bias is None else bias.detach().contiguous())


def packed(weight: torch.Tensor, bias: torch.Tensor | None = None):
    """`weight`'s int8 form (with `bias`), kept on the weight until either changes in place or
    another bias comes.  Asked at every nn.Linear of a search step, so keyed here in three
    comparisons: packed.kept's general key over two tensors costs three times as much."""
    held = getattr(weight, "_int8", None)
    bias_version = None if bias is None else bias._version
    if held is None or held[0] != weight._version or held[1] is not bias or held[2] != bias_version:
        held = weight._int8 = (weight._version, bias, bias_version, _pack(weight, bias))
    return held[3]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x Wᵀ + b in int8 for x (…, in) and W (out, in)."""
    return _through(x, packed(weight, bias))


def product(h: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
    """h U in int8 for U (in, out), or stacked matrices U (n, in, out) with h (n, …, in)."""
    if U.dim() == 2:
        return _through(h, _packed_t(U))
    return torch.stack([product(h_i, U_i) for h_i, U_i in zip(h.unbind(0), _stacked(U))])


def _through(x: torch.Tensor, pack) -> torch.Tensor:
    """The int8 product of rows x (…, in) and a packed weight, shaped as x."""
    y = torch.ops.quantized.linear_dynamic(x.reshape(-1, x.size(-1)).contiguous(), pack, INPUT_BITS == 7)
    return y.view(*x.shape[:-1], y.size(-1))


def _packed_t(U: torch.Tensor):
    """Uᵀ's int8 form, kept on U (a transposed view is a new tensor at every call)."""
    return kept((U,), "_int8_t", lambda: _pack(U.t(), None))


def _stacked(U: torch.Tensor) -> list[torch.Tensor]:
    """The matrices of a stack U (n, in, out), each kept as one tensor so that its int8 form is kept."""
    return kept((U,), "_int8_parts", lambda: list(U.unbind(0)))
