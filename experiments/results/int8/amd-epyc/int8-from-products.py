"""One product alone (issue 64, decoding.int8_from): x Wᵀ + b of R rows in float32 (the faster
of BLAS and the oneDNN-packed weight) against int8 (int8.linear), one thread, at the search's
shapes; the median of three alternating timings of 200 calls each.  int8 costs about 30 µs
whatever the size; it pays from about a million multiply-adds (R × in × out).

    python -P experiments/results/int8/amd-epyc/int8-from-products.py
"""
import statistics
import time

import torch
from torch.nn import functional as F

from ctxnmt.models import int8, packed

SHAPES = [(128, 768), (256, 768), (256, 1024), (512, 768), (512, 256), (256, 256), (256, 128), (128, 7930),
          (256, 512), (512, 512), (512, 1536), (256, 1536), (1024, 512)]


def per_call(f, n: int = 200) -> float:
    for _ in range(10):
        f()
    start = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - start) / n * 1e6


@torch.no_grad()
def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"{'rows':>4} {'in x out':>11} {'fp32 µs':>8} {'int8 µs':>8} {'fp32/int8':>9} {'MACs':>10}")
    for rows in (1, 2, 5, 10, 20, 40, 80):
        for n_in, n_out in SHAPES:
            x, W, b = torch.randn(rows, n_in), torch.randn(n_out, n_in), torch.randn(n_out)
            fp32, q8 = [], []
            for _ in range(3):
                fp32.append(min(per_call(lambda: F.linear(x, W, b)), per_call(lambda: packed.linear(x, W, b))))
                with int8.int8_products():
                    q8.append(per_call(lambda: int8.linear(x, W, b)))
            a, q = statistics.median(fp32), statistics.median(q8)
            print(f"{rows:4d} {n_in:5d}x{n_out:<5d} {a:8.1f} {q:8.1f} {a / q:9.2f} {rows * n_in * n_out:10,d}",
                  flush=True)


if __name__ == "__main__":
    main()
