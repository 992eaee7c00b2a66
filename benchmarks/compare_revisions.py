"""Training and decoding speed of two git revisions, interleaved batch by batch.

    python benchmarks/compare_revisions.py REV_A REV_B [--config configs/bench.yaml]
        [--batches 8] [--decode-chunks 4] [--decode-batch 64] [--beam 1] [--threads 2]

REV_A and REV_B are anything `git worktree add` accepts (a commit, a branch,
HEAD~1), or `.` for the working tree as it is.  Each revision is checked out into
a temporary worktree and runs in its own worker process; the workers build the same
model (same seed, random weights) and take turns on the same training batches and
the same decoding chunks, in alternating order, so that a shared machine's slow
spells hit both alike.  This is how docs/speed-log.md's "what each optimisation gained"
ratios were measured.  Timing covers the forward pass, backward pass, gradient
clipping and Adam step of each batch; decoding covers the whole search.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKER = r'''
import json, sys, time
root, config, threads, batches, decode_batch, beam, main_root = sys.argv[1:8]
sys.path[:0] = [root, main_root]  # the revision's ctxnmt; the benchmark helpers of this checkout
import torch
from benchmarks.common import first_batches, prepared_data, test_sources
from ctxnmt.config import load_config
from ctxnmt.data.batching import make_batch
from ctxnmt.decoding.translator import search_ids
from ctxnmt.models.nmt import build_model

torch.set_num_threads(int(threads))
torch.manual_seed(0)
cfg = load_config(config, [])
data = prepared_data(cfg)
model = build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
train = data.train
indices = first_batches(cfg, train, int(batches))
sources = test_sources(cfg, data)
print("ready", flush=True)
for line in sys.stdin:
    kind, i = line.split()
    i = int(i)
    start = time.perf_counter()
    if kind == "train":
        model.train()
        batch = make_batch(indices[i], train.src, train.tgt)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        nll, n = model.loss(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask)
        (nll / batch.n_sents).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        check = float(nll.detach())
    else:
        chunk = sources[i * int(decode_batch): (i + 1) * int(decode_batch)]
        hyps = search_ids(model, chunk, cfg.decoding, beam=int(beam), batch_size=int(decode_batch), device="cpu")
        n = sum(len(h[0].tokens) + 1 for h in hyps)
        check = hyps[0][0].tokens[:8]
    print(json.dumps([n, time.perf_counter() - start, check]), flush=True)
'''


def checkout(rev: str, into: Path) -> Path:
    if rev == ".":
        return ROOT
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(into), rev],
                   check=True, stdout=subprocess.DEVNULL)
    return into


def start_worker(code_root: Path, args) -> subprocess.Popen:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(code_root), str(Path(args.config).resolve()), str(args.threads),
         str(args.batches + 1), str(args.decode_batch), str(args.beam), str(ROOT)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if worker.stdout.readline().strip() != "ready":
        raise SystemExit(f"the worker for {code_root} did not start")
    return worker


def interleave(workers: dict, kind: str, rounds: int) -> dict[str, list]:
    """Rate (units per second) per revision over rounds 1…rounds (round 0 warms up)."""
    totals = {name: [0, 0.0] for name in workers}
    checks: dict[str, list] = {name: [] for name in workers}
    for i in range(rounds + 1):
        order = list(workers) if i % 2 else list(workers)[::-1]
        for name in order:
            workers[name].stdin.write(f"{kind} {i}\n")
            workers[name].stdin.flush()
            n, seconds, check = json.loads(workers[name].stdout.readline())
            checks[name].append(check)
            if i:
                totals[name][0] += n
                totals[name][1] += seconds
    return {name: [n / s, checks[name]] for name, (n, s) in totals.items()}


def agreement(checks_a: list, checks_b: list) -> str:
    """How far the two revisions' results agree: losses (rounding may differ) or outputs."""
    if checks_a and isinstance(checks_a[0], float):
        worst = max(abs(x - y) / max(abs(x), 1e-9) for x, y in zip(checks_a, checks_b))
        return f"losses within {worst:.1e} (relative)"
    same = sum(x == y for x, y in zip(checks_a, checks_b))
    return f"{same}/{len(checks_a)} chunks begin with the same tokens"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev_a")
    parser.add_argument("rev_b")
    parser.add_argument("--config", default=str(ROOT / "configs" / "bench.yaml"))
    parser.add_argument("--batches", type=int, default=8, help="timed training batches (after one warm-up)")
    parser.add_argument("--decode-chunks", type=int, default=4, help="timed decoding chunks (after one warm-up)")
    parser.add_argument("--decode-batch", type=int, default=64)
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"A": checkout(args.rev_a, Path(tmp) / "a"), "B": checkout(args.rev_b, Path(tmp) / "b")}
        workers = {}
        try:
            workers = {name: start_worker(root, args) for name, root in roots.items()}
            rows = []
            if args.batches:
                rows.append(("training target tok/s", interleave(workers, "train", args.batches)))
            if args.decode_chunks:
                rows.append((f"beam-{args.beam} generated tok/s", interleave(workers, "decode", args.decode_chunks)))
        finally:
            for worker in workers.values():
                worker.stdin.close()
                worker.wait()
            for root in roots.values():
                if root != ROOT:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(root)], check=False)
    print(f"{'measure':<26} {'A ' + args.rev_a:>14} {'B ' + args.rev_b:>14} {'B/A':>6}  agreement")
    for label, rates in rows:
        (a, checks_a), (b, checks_b) = rates["A"], rates["B"]
        print(f"{label:<26} {a:>14.0f} {b:>14.0f} {b / a:>6.3f}  {agreement(checks_a, checks_b)}")
    print(f"\n{args.threads} threads; {args.batches} training batches and {args.decode_chunks} decoding chunks of "
          f"{args.decode_batch} sentences per revision, interleaved; {args.config}")


if __name__ == "__main__":
    main()
