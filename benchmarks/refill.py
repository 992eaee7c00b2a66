"""Search with refill against search batch by batch, interleaved in one process.

    python benchmarks/refill.py [--config configs/bench.yaml] [--checkpoint CKPT]
        [--beam 1] [--sents 500] [--batch 64] [--rounds 2]

Both modes decode the same test sentences with the same model through
`search_ids`; refill lets the next batch join the tail of the current one
(ctxnmt.decoding.beam.search_batches), batch by batch runs each batch alone.  Runs
alternate (A B, B A, …) so that the machine's slow spells hit both alike.  Use a
trained checkpoint: the gain comes from sentences finishing at different steps.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "bench.yaml"))
    parser.add_argument("--checkpoint", help="trained weights (loaded non-strictly)")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--sents", type=int, default=500)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from benchmarks.common import bench_model, prepared_data, test_sources
    from ctxnmt.config import load_config
    from ctxnmt.decoding import translator

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = load_config(args.config, [])
    data = prepared_data(cfg)
    model = bench_model(cfg, data, args.checkpoint).eval()
    sources = test_sources(cfg, data)[: args.sents]
    search_batches = translator.search_batches

    def refill_below(size: int):
        def search(*a, **kw):
            return search_batches(*a, **{**kw, "refill_below": size})
        return search

    modes = {"refill": refill_below(max(1, args.batch // 2)), "batch by batch": refill_below(0)}
    totals = {name: [0, 0.0] for name in modes}
    outputs = {}
    translator.search_ids(model, sources[: args.batch], cfg.decoding, beam=args.beam, batch_size=args.batch)
    try:
        for r in range(args.rounds):
            for name in (list(modes) if r % 2 == 0 else list(modes)[::-1]):
                translator.search_batches = modes[name]
                start = time.perf_counter()
                hyps = translator.search_ids(model, sources, cfg.decoding, beam=args.beam, batch_size=args.batch)
                totals[name][1] += time.perf_counter() - start
                totals[name][0] += sum(len(h[0].tokens) + 1 for h in hyps)
                outputs[name] = [h[0].tokens for h in hyps]
    finally:
        translator.search_batches = search_batches
    rates = {name: n / s for name, (n, s) in totals.items()}
    same = sum(a == b for a, b in zip(*outputs.values()))
    print(f"beam {args.beam}, {len(sources)} sentences in batches of {args.batch}, {args.rounds} rounds: "
          f"refill {rates['refill']:.0f} tok/s, batch by batch {rates['batch by batch']:.0f} tok/s, "
          f"ratio {rates['refill'] / rates['batch by batch']:.3f}; identical outputs {same}/{len(sources)}")


if __name__ == "__main__":
    main()
