"""Which small model learns most in the demo's 20 CPU minutes?

Trains several candidate configurations side by side (on a GPU, to finish in
minutes), each to the same number of target tokens, validating dev BLEU at
regular token counts.  Reading each curve at (that config's CPU training
tokens/s × 1,200 s), measured with benchmarks/speed.py, tells which candidate
the 2-core demo should use.

    python benchmarks/demo_sweep.py --device cuda --tokens 4000000 --jobs 8
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

BASE = "configs/bench.yaml"
# name -> overrides of the bench config (bench: emb 256, hidden 512, att 512, joint BPE 8k, 80 sents/batch)
PT = "model.init=pytorch"
CANDIDATES = {
    "h512-lr1e-3-do0.2-tie-ls": [PT, "model.dropout_out=0.2", "model.tie_embeddings=true",
                                 "training.label_smoothing=0.1"],
    "h512-lr1e-3-do0.2": [PT, "model.dropout_out=0.2"],
    "h512-lr2e-3-do0.2": [PT, "training.lr=0.002", "model.dropout_out=0.2"],
    "h512-lr2e-3-do0.2-tie-ls": [PT, "training.lr=0.002", "model.dropout_out=0.2", "model.tie_embeddings=true",
                                 "training.label_smoothing=0.1"],
    "h256-lr2e-3-do0.2": [PT, "model.hidden_dim=256", "model.att_dim=256", "training.lr=0.002",
                          "model.dropout_out=0.2"],
    "h384-lr2e-3-do0.2": [PT, "model.hidden_dim=384", "model.att_dim=384", "training.lr=0.002",
                          "model.dropout_out=0.2"],
    "h512-lr2e-3-do0.2-b40": [PT, "training.lr=0.002", "model.dropout_out=0.2", "training.batch_sents=40"],
    "h512-lr1e-3-do0.5-papers-init": [],
}


def run(args) -> None:
    names = args.only or list(CANDIDATES)
    procs = {}
    for name in names:
        out = Path(args.out) / name
        sets = CANDIDATES[name] + [
            f"model_dir={out}", f"training.device={args.device}", f"training.max_minutes={args.max_minutes}",
            f"training.max_updates={args.tokens // 2600 * (2 if 'b40' in name else 1)}",
            f"training.valid_every={args.valid_tokens // 2600 * (2 if 'b40' in name else 1)}",
            "training.patience=0", "training.lr_decay=1.0", "training.threads=2", "training.log_every=100",
        ]
        if args.prep:
            out.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-r", args.prep, str(out / "prep")], check=True)
        cmd = [sys.executable, "-m", "ctxnmt.cli", "train", BASE, "--quiet"] + [a for s in sets for a in ("--set", s)]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(f"{out}.err", "w"))
    for proc in procs.values():
        proc.wait()
    summary = {name: curve(Path(args.out) / name / "train.log") for name in names}
    Path(args.out, "sweep.json").write_text(json.dumps(summary, indent=1))
    print("SWEEP " + json.dumps(summary))
    for name, points in summary.items():
        print(name, " ".join(f"{t / 1e6:.2f}M:{b:.2f}" for t, b in points))


def curve(log: Path) -> list[tuple[int, float]]:
    pattern = re.compile(r"validation at update \d+ \((\d+) target tokens\): ppl [\d.]+, bleu ([\d.]+)")
    if not log.is_file():
        return []
    return [(int(m.group(1)), float(m.group(2))) for m in pattern.finditer(log.read_text())]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tokens", type=int, default=4_000_000)
    parser.add_argument("--valid-tokens", type=int, default=400_000)
    parser.add_argument("--max-minutes", type=float, default=8.0)
    parser.add_argument("--out", default="runs/sweep")
    parser.add_argument("--prep", help="a prepared MODEL_DIR/prep to copy into every run (skips preparation)")
    parser.add_argument("--only", nargs="*")
    run(parser.parse_args())
