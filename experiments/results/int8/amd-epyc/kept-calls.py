"""The cost of one call of the keepers of packed forms, without autograd, for a 64 × 64 weight:
packed.kept over one tensor (the float32 pack's and int8's transposed matrices) and int8.packed
over a weight and its bias; 200,000 calls each after one, in the tree given (a checkout of the
repository), so that two commits compare:

    python -P experiments/results/int8/amd-epyc/kept-calls.py TREE
"""
import sys
import time

import torch

sys.path.insert(0, sys.argv[1])
from ctxnmt.models import int8, packed  # noqa: E402  (from the tree given)

CALLS = 200_000


def microseconds(call) -> float:
    call()
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    return (time.perf_counter() - start) / CALLS * 1e6


torch.set_grad_enabled(False)
w, b = torch.randn(64, 64), torch.randn(64)
if hasattr(packed, "gathered"):  # before 9604861: kept(tensor, …) beside gathered(tensors, …)
    one = lambda: packed.kept(w, "_bench", lambda: 1)  # noqa: E731
else:
    one = lambda: packed.kept((w,), "_bench", lambda: 1)  # noqa: E731
print(f"{sys.argv[1]}: keeper of one tensor {microseconds(one):.2f} µs, "
      f"int8.packed {microseconds(lambda: int8.packed(w, b)):.2f} µs")
