"""Does bf16 train as fp32 does?  The same model (same initial weights) trained on the same
batches in each precision for N updates; prints each precision's training loss per target
token, averaged over the last 20 updates, and bf16's relative difference to fp32 (issue 33
asks for within 1% after 200 updates).

    python benchmarks/precision_losses.py configs/rnnsearch.yaml --updates 200 --device cuda --graphs
    python benchmarks/precision_losses.py configs/rnnsearch.yaml --tiny --updates 10     # a smoke test on a CPU

Adam at the config's learning rate, gradient clipping at its clip_norm, no schedule;
`--graphs` trains through CUDA graphs (training.cuda_graphs), as the trainer would.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TINY = ["model.emb_dim=16", "model.hidden_dim=32", "model.att_dim=32", "training.batch_sents=8"]
LAST = 20  # updates averaged at the end


def train(cfg, data, batches, precision_name: str, graphs: bool, device) -> list[float]:
    """Loss per target token of every update."""
    from benchmarks.common import CtxnmtUpdate, bench_model
    from ctxnmt.data.batching import make_batch
    from ctxnmt.training.precision import Precision

    torch.manual_seed(0)
    model = bench_model(cfg, data, None).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.training.lr)
    update = CtxnmtUpdate(model, optimizer, Precision(precision_name, device), graphs,
                          cfg.training.label_smoothing, cfg.training.clip_norm)
    losses = []
    for index in batches:
        nll, tokens = update(make_batch(index, data.train.src, data.train.tgt))
        losses.append(float(nll.detach()) / tokens)
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--graphs", action="store_true", help="through CUDA graphs (training.cuda_graphs)")
    parser.add_argument("--tiny", action="store_true", help="embeddings 16, hidden 32, 8 sentences a batch")
    args = parser.parse_args()
    from benchmarks.common import first_batches, prepared_data
    from ctxnmt.config import load_config

    cfg = load_config(args.config, (TINY if args.tiny else []) + [f"training.device={args.device}"])
    data = prepared_data(cfg)
    batches = first_batches(cfg, data.train, args.updates)
    device = torch.device(args.device)
    means = {}
    for precision in ("fp32", "bf16"):
        start = time.perf_counter()
        losses = train(cfg, data, batches, precision, args.graphs, device)
        means[precision] = sum(losses[-LAST:]) / len(losses[-LAST:])
        print(f"{precision}: loss per token {losses[0]:.4f} at update 1, {means[precision]:.4f} over updates "
              f"{max(1, len(losses) - LAST + 1)}–{len(losses)} ({time.perf_counter() - start:.0f} s)", flush=True)
    difference = (means["bf16"] - means["fp32"]) / means["fp32"]
    print(f"bf16 against fp32 after {len(batches)} updates: {difference:+.2%}"
          f"{' (through CUDA graphs)' if args.graphs else ''}")


if __name__ == "__main__":
    main()
