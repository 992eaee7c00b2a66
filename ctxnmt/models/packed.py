"""float32 products of a search step on the CPU with the weight packed once for oneDNN.

A search step multiplies a few rows (a beam's, a document wave's) by the same weight at every
step.  CPU BLAS re-lays the weight out for each such product; oneDNN's linear takes it packed
once into its own blocked layout (`mkldnn._reorder_linear_weight`, what torch.compile's CPU
backend does for inference).  For the output layer (7,930 × 128) that made the product 2.8-4.3x
faster from 5 to 30 rows and 1.1x at 200 (docs/speed-log.md, benchmarks/logits_layout.py).  The
packed product computes the same x Wᵀ + b to float rounding, and from 16 rows up each row's
result is independent of the other rows (tests/models/test_packed.py).

A weight's packed form is made at its first use and kept on the tensor, made again if the
tensor changes in place (as training's validation searches do between updates)."""
from __future__ import annotations

import operator

import torch

# The packed layout depends on this hint only in how it blocks the rows; from 16 on, a row's
# result is the same whatever the number of rows in the product.
_ROWS_HINT = 64
# Below this many rows a recurrent product is faster through BLAS (one row: 17 µs against 35 µs
# for 256 × 768).
PRODUCT_ROWS = 4


def _ops_present() -> bool:
    ops = torch.ops.mkldnn
    return (torch.backends.mkldnn.is_available() and hasattr(ops, "_reorder_linear_weight")
            and hasattr(ops, "_linear_pointwise"))


AVAILABLE = _ops_present()


def serves(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the packed product serves x · Wᵀ: float32 rows (R, in) and W (out, in) on the
    CPU, without autograd (the packed weight has no gradient) or CPU autocast."""
    return (AVAILABLE and not torch.is_grad_enabled() and x.device.type == "cpu" and x.dim() == 2
            and weight.dim() == 2 and x.dtype == torch.float32 and weight.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu"))


def kept(tensors: tuple[torch.Tensor, ...], slot: str, make):
    """make(), a form of `tensors` (a packed or int8 weight; a matrix gathered from several: a
    transposed view, a concatenation) kept on the first of them until any of them changes in
    place (its version counter) or is another tensor, so that it is made once rather than for
    every batch.  With autograd on it is made afresh: in training it must carry the gradient."""
    if torch.is_grad_enabled():
        return make()
    first, others = tensors[0], tensors[1:]
    # asked at every product of a search step: one tensor, the usual case, costs one version read
    versions = tuple([t._version for t in tensors]) if others else first._version
    held = getattr(first, slot, None)
    if held is None or held[0] != versions or (others and not all(map(operator.is_, held[1], others))):
        held = (versions, others, make())
        setattr(first, slot, held)
    return held[2]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x Wᵀ (+ b) for rows x (R, in) and W (out, in), W packed once (where `serves`)."""
    return _through(x, kept((weight,), "_packed_fp32", lambda: _pack(weight)), bias)


def product(h: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
    """h U for rows h (R, in) and a matrix U (in, out) read at every step, Uᵀ packed once and
    kept on U (where `serves(h, Uᵀ)`)."""
    return _through(h, kept((U,), "_packed_fp32_t", lambda: _pack(U.t())), None)


def _pack(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), _ROWS_HINT)


def _through(x: torch.Tensor, pack: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), pack, None if bias is None else bias.contiguous(),
                                              "none", [], "")
