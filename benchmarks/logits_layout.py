"""The decoding step's softmax layer in its three forms, for a range of row counts: t W_oᵀ and
(W_o tᵀ)ᵀ through CPU BLAS, and t W_oᵀ through oneDNN with W_o packed once (ctxnmt.models.packed);
then the search's candidates step (`top_log_softmax`, k = 10) with and without the packed form.

    python benchmarks/logits_layout.py [--vocab 7930] [--dim 128] [--threads 1] [--evict 8]

A search step reads its other weights between two output layers, so by default 8 MB of other
data are written before each timed call (--evict 0: the weight stays in cache, as in a bare loop,
which flatters the forms that re-read it).  Per form the median of --reps calls, the forms
interleaved, so that every ratio is read within one run.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ctxnmt.models import functional, kernels, packed  # noqa: E402

ROWS = (1, 5, 10, 15, 30, 64, 128, 200, 320)


def forms(w, b) -> dict:
    return {
        "t W_oᵀ": lambda x: torch.log_softmax(F.linear(x, w, b), -1),
        "(W_o tᵀ)ᵀ": lambda x: torch.log_softmax(torch.addmm(b.unsqueeze(1), w, x.t()).t().contiguous(), -1),
        "packed": lambda x: torch.log_softmax(packed.linear(x, w, b), -1),
    }


def top_k(w, b, use_packed: bool):
    def step(x):
        packed.AVAILABLE = use_packed
        try:
            return functional.top_log_softmax(x, w, b, 10)
        finally:
            packed.AVAILABLE = AVAILABLE
    return step


AVAILABLE = packed.AVAILABLE


def median_us(form, x, junk: torch.Tensor | None, reps: int) -> float:
    times = []
    for _ in range(reps):
        if junk is not None:
            junk.mul_(1.0001)
        start = time.perf_counter()
        form(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=7930)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--evict", type=float, default=8, help="MB written before each call (default 8)")
    parser.add_argument("--reps", type=int, default=100)
    args = parser.parse_args()
    if not AVAILABLE:
        raise SystemExit("logits_layout: this torch has no oneDNN linear; nothing to compare")
    torch.set_num_threads(args.threads)
    kernels.available()
    w, b = torch.randn(args.vocab, args.dim) / args.dim ** 0.5, torch.randn(args.vocab)
    junk = torch.randn(int(args.evict * 2 ** 18)) if args.evict > 0 else None
    timed = {**forms(w, b), "top-k, BLAS": top_k(w, b, False), "top-k, packed": top_k(w, b, True)}
    print(f"{'rows':>5} " + " ".join(f"{name:>14}" for name in timed) + "   (µs)")
    with torch.no_grad():
        for rows in ROWS:
            x = torch.randn(rows, args.dim)
            expected = forms(w, b)["t W_oᵀ"](x)
            for form in forms(w, b).values():
                torch.testing.assert_close(form(x), expected, rtol=1e-4, atol=1e-4)
            us = {name: [] for name in timed}
            for round_ in range(4):
                for name, form in (list(timed.items()) if round_ % 2 else list(timed.items())[::-1]):
                    us[name].append(median_us(form, x, junk, args.reps // 4 or 1))
            print(f"{rows:>5} " + " ".join(f"{statistics.median(us[name]):>14.0f}" for name in timed))
    print(f"\n{torch.get_num_threads()} thread(s); vocabulary {args.vocab}, readout size {args.dim}; "
          f"log-softmax included; {args.evict:g} MB written before each call")


if __name__ == "__main__":
    main()
