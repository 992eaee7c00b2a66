"""Training and decoding speed, memory, and the share of this machine's compute used.

    python benchmarks/speed.py configs/bench.yaml [configs/other.yaml ...] [--json out.json]
    python benchmarks/speed.py configs/rnnsearch.yaml "configs/rnnsearch.yaml::training.precision=bf16" \
        --device cuda --before --beams 5

Each config is measured in a fresh subprocess (so peak resident memory belongs to
that config alone), one after the other in this one script run; ratios are
against the first config.  Training runs in the config's training.precision (--bf16:
bf16 for all), as the trainer runs it; decoding under the same autocast.  --before
measures every config a second time with CTXNMT_GPU_FAST=0, i.e. without the GPU
paths of ctxnmt/models/functional.py (issue 33): the code before them, in the same
run.  For each it reports:
  - training target tokens/s after warm-up, on the first batches of epoch 1
    (the same batches for every config with the same data settings);
  - peak resident memory of the process;
  - decoding sentences/s and generated tokens/s for greedy, beam 5 and beam 10
    (--beams) on the first --decode-sents test sentences (batched beam search), the median
    of --decode-repeats runs (single runs moved by ±15% on this shared machine);
  - the analytic FLOPs per target token of training (forward + backward ≈ 3×
    forward) and the float32 matmul throughput of this machine, sampled between the
    timed training batches, so that the fraction of the compute limit reached can
    be printed.
Decoding speed depends on output lengths, so use --checkpoint with a trained
model for meaningful sentences/s (a random model often runs to the length limit).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class MatmulProbe:
    """The machine's float32 matmul rate (2048² products), sampled between the timed
    training batches: a shared machine's speed drifts by ±20% within a minute, so the
    compute fraction compares the training rate with the rate of the same moments."""

    def __init__(self, device, size: int = 2048):
        import torch

        self.device, self.size = device, size
        self.a, self.b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
        self.flops = self.seconds = 0.0
        self.sample(reps=2, record=False)  # warm-up

    def sample(self, reps: int = 2, record: bool = True) -> None:
        sync(self.device)
        start = time.perf_counter()
        for _ in range(reps):
            self.a @ self.b
        sync(self.device)
        if record:
            self.seconds += time.perf_counter() - start
            self.flops += 2.0 * self.size ** 3 * reps

    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9


def model_gemm_shapes(cfg, vocab: int, batch: int, src_len: int, tgt_len: int) -> list[tuple[int, int, int, int]]:
    """(M, K, N, count) of the matrix products of one training step of the bench model: the
    forward products and, for each, the two backward products (dX = dY Wᵀ, dW = Xᵀ dY)."""
    from ctxnmt.models.output import readout_dim

    m = cfg.model
    E, H, A, R = m.emb_dim, m.hidden_dim, m.att_dim, readout_dim(m)
    C, B, S, T = 2 * H, batch, src_len, tgt_len
    forward = [
        (B * S, E, 3 * H, 2),  # encoder input projections, both directions
        (B, H, 3 * H, 2 * S),  # encoder recurrence, both directions, every step
        (B * S, C, A, 1), (B * S, C, 3 * H, 1),  # attention keys and GRU_2 input terms
        (B * T, E, 3 * H, 1),  # GRU_1 input projection
        (B, H, 3 * H, T), (B, H, A + 3 * H, T),  # GRU_1 recurrence; W_d and U of GRU_2
        (B * T, H, R, 1), (B * T, E, R, 1), (B * T, C, R, 1),  # deep output
        (B * T, R, vocab, 1),  # softmax layer
    ]
    shapes = []
    for M, K, N, count in forward:
        shapes += [(M, K, N, count), (M, N, K, count), (K, M, N, count)]
    return shapes


def model_gemm_gflops(device, shapes, reps: int = 3) -> float:
    """The float32 rate of this model's own matrix-product shapes: total FLOPs over total
    time, each shape timed with its count.  This is issue 3's "80–140 GFLOP/s for this
    model's shapes", the ceiling that small per-step products impose; the 2048² rate
    (MatmulProbe) is the machine's peak."""
    import torch

    flops = seconds = 0.0
    for M, K, N, count in shapes:
        a, b = torch.randn(M, K, device=device), torch.randn(K, N, device=device)
        a @ b
        sync(device)
        n = max(1, min(count, 64)) * reps
        start = time.perf_counter()
        for _ in range(n):
            a @ b
        sync(device)
        seconds += (time.perf_counter() - start) / n * count
        flops += 2.0 * M * K * N * count
    return flops / seconds / 1e9


def sync(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def forward_flops_per_target_token(cfg, vocab: int, src_len: float, tgt_len: float) -> float:
    """Multiply-adds ×2 of one forward pass of the RNNsearch family, per target token."""
    from ctxnmt.models.output import readout_dim

    m = cfg.model
    E, H, A, R = m.emb_dim, m.hidden_dim, m.att_dim, readout_dim(m)  # R: readout size
    C = 2 * H
    per_src = 2 * 3 * H * (E + H)  # two GRU directions: input and recurrent products
    per_sentence_src = src_len * (C * A + C * 3 * H)  # attention keys and GRU_2 input terms, once per sentence
    per_tgt = (3 * H * (E + H)  # GRU_1
               + H * (A + 3 * H)  # W_d and U of GRU_2 in one product
               + src_len * (A + A + 3 * H + C)  # energies, α-mix of GRU_2 inputs, context vector
               + R * (H + E + C)  # deep output
               + R * vocab)  # softmax layer
    return 2 * (per_tgt + (src_len * per_src + per_sentence_src) / tgt_len)


def measure(config_path: str, overrides: list[str], args) -> dict:
    import torch

    from benchmarks.common import CtxnmtUpdate, bench_model, first_batches, prepared_data, test_sources
    from ctxnmt.config import load_config
    from ctxnmt.data.batching import make_batch, padding_ratio
    from ctxnmt.decoding.translator import search_ids
    from ctxnmt.models.nmt import count_parameters
    from ctxnmt.training.precision import Precision

    torch.set_num_threads(args.threads or os.cpu_count())
    torch.manual_seed(0)
    cfg = load_config(config_path, overrides + args.decoding)
    device = torch.device(args.device)
    precision = Precision("bf16" if args.bf16 else cfg.training.precision, device)
    data = prepared_data(cfg)
    model = bench_model(cfg, data, args.checkpoint).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    train = data.train
    src_lens, tgt_lens = [len(s) for s in train.src], [len(s) for s in train.tgt]
    batches = first_batches(cfg, train, args.warmup + args.train_batches)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    model.train()
    tokens, elapsed = 0, 0.0
    probe = MatmulProbe(device)
    update = CtxnmtUpdate(model, optimizer, precision, graphs=cfg.training.cuda_graphs)
    warmup = args.warmup
    if update.graphs is not None:  # every timed batch's shape captured first
        batches = batches[:warmup] + batches[warmup:] + batches[warmup:]
        warmup = len(batches) - args.train_batches
    for i, index in enumerate(batches):
        host = make_batch(index, train.src, train.tgt)
        batch = host.to(device) if update.graphs is None else None  # graphs take the batch from the host
        if i >= warmup:
            probe.sample()
        sync(device)
        start = time.perf_counter()
        _, n = update(host, batch)
        sync(device)
        if i >= warmup:
            elapsed += time.perf_counter() - start
            tokens += n
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    timed = batches[warmup:]
    mean_src = sum(src_lens[i] for b in timed for i in b) / sum(len(b) for b in timed)
    mean_tgt = sum(tgt_lens[i] for b in timed for i in b) / sum(len(b) for b in timed)
    flops = 3 * forward_flops_per_target_token(cfg, len(data.tgt_vocab), mean_src, mean_tgt)
    gflops = probe.gflops()
    shape_gflops = model_gemm_gflops(device, model_gemm_shapes(
        cfg, len(data.tgt_vocab), round(sum(len(b) for b in timed) / len(timed)), round(mean_src), round(mean_tgt)))
    result = {
        "config": config_path, "overrides": overrides, "device": str(device), "threads": torch.get_num_threads(),
        "bf16": args.bf16, "precision": precision.name, "gpu_paths": os.environ.get("CTXNMT_GPU_FAST", "1") != "0",
        "parameters": count_parameters(model), "train_tok_s": tokens / elapsed,
        "graphs_captured": update.graphs.captured if update.graphs is not None else 0, "decoding": args.decoding,
        "train_sents_per_batch": sum(len(b) for b in timed) / len(timed), "train_tokens_per_batch": tokens / len(timed),
        "padding_src_tgt": padding_ratio(timed, src_lens, tgt_lens),
        "peak_rss_mb": peak_rss, "rss_before_training_mb": rss_before,
        "train_flops_per_token": flops, "matmul_gflops": gflops,
        "compute_fraction": tokens / elapsed * flops / (gflops * 1e9),
        "model_shape_gflops": shape_gflops,
        "compute_fraction_model_shapes": tokens / elapsed * flops / (shape_gflops * 1e9),
    }
    sources = test_sources(cfg, data, args.decode_sents)
    n = len(sources)
    model.eval()
    for beam in args.beams:
        runs = []  # seconds of each repeat; the outputs are the same every time
        for _ in range(args.decode_repeats):
            sync(device)
            start = time.perf_counter()
            with precision.autocast():
                hyps = search_ids(model, sources, cfg.decoding, beam=beam, batch_size=args.decode_batch,
                                  device=device)
            sync(device)
            runs.append(time.perf_counter() - start)
        seconds = sorted(runs)[len(runs) // 2]  # the median repeat
        generated = sum(len(h[0].tokens) + 1 for h in hyps)  # with EOS
        result[f"beam{beam}_sents_s"] = n / seconds
        result[f"beam{beam}_tok_s"] = generated / seconds
        result[f"beam{beam}_tok_s_runs"] = [generated / r for r in runs]
    result["decode_sents"], result["decode_repeats"] = n, args.decode_repeats
    return result


def row_name(r: dict) -> str:
    """Config, precision and [before] first (the table cuts long names), then other overrides."""
    precision = r.get("precision", "bf16" if r.get("bf16") else "fp32")
    sets = [o for o in r["overrides"] if not o.startswith("training.precision=")]
    return " ".join([Path(r["config"]).stem, precision] + ([] if r.get("gpu_paths", True) else ["[before]"]) + sets)


def print_table(results: list[dict]) -> None:
    base = results[0]
    beams = [b for b in (1, 5, 10) if f"beam{b}_tok_s" in base]
    title = {1: "greedy tok/s", 5: "beam5 tok/s", 10: "beam10 tok/s"}
    head = (f"{'config':<44} {'params':>9} {'train tok/s':>12} {'ratio':>6} {'compute':>8} {'shapes':>7} "
            f"{'peak RSS':>9} " + " ".join(f"{title[b]:>13}" for b in beams)
            + (f" {'beam5 sent/s':>13} {'ratio b5':>9}" if 5 in beams else ""))
    print(head)
    print("-" * len(head))
    for r in results:
        print(f"{row_name(r)[:44]:<44} {r['parameters'] / 1e6:>8.1f}M {r['train_tok_s']:>12.0f} "
              f"{r['train_tok_s'] / base['train_tok_s']:>6.2f} {r['compute_fraction']:>8.0%} "
              f"{r['compute_fraction_model_shapes']:>7.0%} {r['peak_rss_mb'] / 1024:>8.2f}G "
              + " ".join(f"{r[f'beam{b}_tok_s']:>13.0f}" for b in beams)
              + (f" {r['beam5_sents_s']:>13.1f} {r['beam5_tok_s'] / base['beam5_tok_s']:>9.2f}" if 5 in beams else ""))
    r = base
    print(f"\nmatmul {r['matmul_gflops']:.0f} GFLOP/s (float32, 2048², sampled between the training batches; "
          f"'compute' column), "
          f"{r['model_shape_gflops']:.0f} GFLOP/s at this model's own product shapes ('shapes' column), "
          f"{r['threads']} threads on {r['device']}; "
          f"training ≈ {r['train_flops_per_token'] / 1e6:.0f} MFLOP per target token; "
          f"{r['train_sents_per_batch']:.0f} sentences ≈ {r['train_tokens_per_batch']:.0f} target tokens per batch, "
          f"padding {r['padding_src_tgt'][0]:.1%} source / {r['padding_src_tgt'][1]:.1%} target; "
          f"decoding {r['decode_sents']} test sentences (median of {r.get('decode_repeats', 1)} runs)"
          + (f" with {', '.join(r['decoding'])}" if r.get("decoding") else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", help="config files; 'FILE::key=value,key=value' adds overrides")
    parser.add_argument("--train-batches", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--decode-sents", type=int, default=500)
    parser.add_argument("--decode-batch", type=int, default=64)
    parser.add_argument("--decode-repeats", type=int, default=3,
                        help="decode each setting this many times and report the median (the machine drifts)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--checkpoint", help="trained weights to decode with (loaded non-strictly into each config)")
    parser.add_argument("--bf16", action="store_true", help="train and decode every config in bf16 (training.precision=bf16)")
    parser.add_argument("--beams", type=lambda text: [int(b) for b in text.split(",")], default=[1, 5, 10],
                        help="beam sizes to decode with, e.g. 5 or 1,5,10 (1 = greedy; default 1,5,10)")
    parser.add_argument("--before", action="store_true",
                        help="also measure every config with CTXNMT_GPU_FAST=0 (without the GPU paths)")
    parser.add_argument("--decoding", type=lambda text: [s for s in text.split(",") if s], default=[],
                        help="decoding.* settings for every row, e.g. the fixed lengths an untrained model needs "
                             "to write outputs of a realistic length; named under the table")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one config, print JSON
    args = parser.parse_args()
    if args.one:
        path, _, sets = args.one.partition("::")
        print("RESULT " + json.dumps(measure(path, [s for s in sets.split(",") if s], args)))
        return
    results = []
    runs = [(spec, {}) for spec in args.configs]
    if args.before:  # first, so that the ratios are to the code before the GPU paths
        runs = [(spec, {"CTXNMT_GPU_FAST": "0"}) for spec in args.configs] + runs
    for spec, env in runs:
        cmd = [sys.executable, __file__, spec, "--one", spec] + [
            f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
            if k not in ("configs", "one", "json", "bf16", "beams", "before", "decoding") and v is not None]
        cmd += ["--decoding", ",".join(args.decoding)] if args.decoding else []
        cmd += ["--beams", ",".join(map(str, args.beams))] + (["--bf16"] if args.bf16 else [])
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, **env})
        result = next((line for line in done.stdout.splitlines() if line.startswith("RESULT ")), None)
        if done.returncode or result is None:  # one failed setting must not cost the others' figures
            print(f"FAILED {spec}{' (before)' if env else ''}: exit status {done.returncode}", file=sys.stderr)
            continue
        results.append(json.loads(result[7:]))
        r = results[-1]  # as it comes: a run cut short by a time limit keeps what it measured
        print(f"measured {row_name(r)}: train {r['train_tok_s']:.0f} tok/s, "
              + ", ".join(f"beam {b} {r[f'beam{b}_tok_s']:.0f} tok/s" for b in args.beams), file=sys.stderr)
    if not results:
        sys.exit("no setting could be measured")
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
