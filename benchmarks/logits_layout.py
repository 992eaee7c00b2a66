"""The decoding step's softmax layer, t W_oᵀ against (W_o tᵀ)ᵀ, for a range of row counts.

    python benchmarks/logits_layout.py [--vocab 7930] [--dim 256] [--threads 0]

NMTModel.log_probs takes the product as W_o tᵀ (V × R) and transposes it back when
R < 256, because CPU BLAS runs that orientation faster for few rows.  This script
measures both forms side by side (interleaved; per form the fastest of three rounds) so that the
threshold can be checked on another machine or BLAS.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
from torch.nn import functional as F

ROWS = (8, 16, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 400)


def row_major(x, w, b):
    return torch.log_softmax(F.linear(x, w, b), -1)


def transposed(x, w, b):
    return torch.log_softmax(torch.addmm(b.unsqueeze(1), w, x.t()).t().contiguous(), -1)


def best_ms(form, x, w, b, reps: int = 30) -> float:
    for _ in range(3):
        form(x, w, b)
    start = time.perf_counter()
    for _ in range(reps):
        form(x, w, b)
    return (time.perf_counter() - start) / reps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=7930)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads or os.cpu_count())
    w, b = torch.randn(args.vocab, args.dim) / args.dim ** 0.5, torch.randn(args.vocab)
    forms = {"t W_oᵀ": row_major, "(W_o tᵀ)ᵀ": transposed}
    times: dict[tuple[int, str], list[float]] = {}
    for round_ in range(3):
        for rows in ROWS:
            x = torch.randn(rows, args.dim)
            torch.testing.assert_close(transposed(x, w, b), row_major(x, w, b), rtol=1e-4, atol=1e-4)
            for name, form in (list(forms.items()) if round_ % 2 else list(forms.items())[::-1]):
                times.setdefault((rows, name), []).append(best_ms(form, x, w, b))
    print(f"{'rows':>5} {'t W_oᵀ ms':>10} {'(W_o tᵀ)ᵀ ms':>14} {'speed-up':>9}")
    for rows in ROWS:
        plain, turned = (min(times[(rows, name)]) for name in forms)
        print(f"{rows:>5} {plain:>10.2f} {turned:>14.2f} {plain / turned:>9.2f}")
    print(f"\n{torch.get_num_threads()} threads; vocabulary {args.vocab}, readout size {args.dim}; "
          "log-softmax included; best of three interleaved rounds")


if __name__ == "__main__":
    main()
