"""The additive attention energy with torch.tanh against ctxnmt's sigmoid form, interleaved.

    python benchmarks/attention_energy.py configs/bench.yaml [--batches 8] [--decode-sents 100]
        [--checkpoint runs/demo/checkpoints/best.pt] [--threads 0]

ctxnmt computes vᵀ tanh(k_i + q) as 2 vᵀσ(2(k_i + q)) − Σ v (ctxnmt.models.functional),
because PyTorch's float32 tanh is about four times slower than its sigmoid on CPU.  This
script measures what that gains: the same model's training steps (forward + backward)
and beam-search batches alternate between the plain tanh form (below, with the same
recomputation in the backward pass) and the library's, on the same batches, in one
process, so that a noisy machine hits both alike.  Where the fused CPU kernels are
built (ctxnmt.models.kernels), the library's form is the fused kernel; CTXNMT_KERNELS=0
measures the PyTorch sigmoid form instead.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


class _TanhEnergy(torch.autograd.Function):
    """vᵀ tanh(k_i + q) with torch.tanh, recomputed in the backward pass: the comparison point."""

    @staticmethod
    def forward(ctx, keys, query, v):
        ctx.save_for_backward(keys, query, v)
        return torch.tanh(keys.unsqueeze(1) + query.unsqueeze(2)) @ v

    @staticmethod
    def backward(ctx, grad):
        keys, query, v = ctx.saved_tensors
        hidden = torch.tanh(keys.unsqueeze(1) + query.unsqueeze(2))
        grad_v = torch.einsum("nks,nksa->a", grad, hidden)
        grad_pre = hidden.square_().neg_().add_(1.0).mul_(v).mul_(grad.unsqueeze(-1))
        return grad_pre.sum(1), grad_pre.sum(2), grad_v


def tanh_energy(keys, query, v):
    if torch.is_grad_enabled():
        return _TanhEnergy.apply(keys, query, v)
    return torch.tanh_(keys.unsqueeze(1) + query.unsqueeze(2)) @ v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--batches", type=int, default=8, help="training batches timed (after one warm-up)")
    parser.add_argument("--decode-sents", type=int, default=100)
    parser.add_argument("--decode-batch", type=int, default=25)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--checkpoint", help="trained weights, for realistic output lengths in decoding")
    args = parser.parse_args()

    import ctxnmt.models.attention as attention
    from benchmarks.common import bench_model, first_batches, prepared_data, test_sources
    from ctxnmt.config import load_config
    from ctxnmt.data.batching import make_batch
    from ctxnmt.decoding.translator import search_ids
    from ctxnmt.models.functional import additive_energy

    torch.set_num_threads(args.threads or os.cpu_count())
    torch.manual_seed(0)
    cfg = load_config(args.config, [])
    data = prepared_data(cfg)
    model = bench_model(cfg, data, args.checkpoint, strict=True)
    from ctxnmt.models import kernels

    library = "ctxnmt (fused kernel)" if kernels.available() else "ctxnmt (sigmoid)"
    forms = {"tanh": tanh_energy, library: additive_energy}

    train = data.train
    indices = first_batches(cfg, train, args.batches + 1)
    train_rate = {name: [0, 0.0] for name in forms}
    model.train()
    for i, index in enumerate(indices):
        batch = make_batch(index, train.src, train.tgt)
        order = list(forms.items()) if i % 2 else list(forms.items())[::-1]
        for name, energy in order:
            attention.additive_energy = energy
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            nll, n = model.loss(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask)
            (nll / batch.n_sents).backward()
            if i:  # the first batch warms up
                train_rate[name][0] += n
                train_rate[name][1] += time.perf_counter() - start

    sources = test_sources(cfg, data, args.decode_sents)
    n = len(sources)
    decode_rate = {name: [0, 0.0] for name in forms}
    model.eval()
    for i, start_sent in enumerate(range(0, n, args.decode_batch)):
        chunk = sources[start_sent: start_sent + args.decode_batch]
        for name, energy in (list(forms.items()) if i % 2 else list(forms.items())[::-1]):
            attention.additive_energy = energy
            start = time.perf_counter()
            hyps = search_ids(model, chunk, cfg.decoding, beam=5, batch_size=args.decode_batch, device="cpu")
            decode_rate[name][1] += time.perf_counter() - start
            decode_rate[name][0] += sum(len(h[0].tokens) + 1 for h in hyps)
    attention.additive_energy = additive_energy

    base = "tanh"
    print(f"{'energy':<18} {'train tok/s':>12} {'ratio':>6} {'beam-5 tok/s':>13} {'ratio':>6}")
    for name in forms:
        tr = train_rate[name][0] / train_rate[name][1]
        de = decode_rate[name][0] / decode_rate[name][1]
        print(f"{name:<18} {tr:>12.0f} {tr / (train_rate[base][0] / train_rate[base][1]):>6.3f} "
              f"{de:>13.0f} {de / (decode_rate[base][0] / decode_rate[base][1]):>6.3f}")
    print(f"\n{torch.get_num_threads()} threads; {args.batches} training batches (forward + backward, no optimizer "
          f"step); beam 5 over {n} test sentences in chunks of {args.decode_batch}")


if __name__ == "__main__":
    main()
