"""A plain one-file PyTorch RNNsearch trained side by side with ctxnmt's, in one process.

    python benchmarks/gpu_reference.py --device cuda          # the papers' sizes, 80 sentences a batch
    python benchmarks/gpu_reference.py --tiny                 # tiny sizes: a smoke test on the CPU

The plain model is what a PyTorch user would write for RNNsearch: torch.nn.GRU (cuDNN on
CUDA) over the packed source in both directions, a Python loop over the target steps with
one nn.GRUCell (Bahdanau et al.'s decoder: attention from s_{t-1}, GRU input [E y_{t-1}; c_t]),
additive attention, a deep output and a full softmax cross-entropy.  It does less work per
step than ctxnmt's conditional GRU (one GRU, not two); --cgru adds a second plain model with
dl4mt's conditional GRU (GRU_1, attention from s'_t, GRU_2 over c_t), ctxnmt's family.
Sizes, vocabulary and batches are the config's (configs/rnnsearch.yaml: embeddings 500, hidden
1024, attention 1024, 80 sentences a batch): the first batches of its epoch 1, the same for
every model.  Each round trains every model and precision on the same batches in turn, so
drift of the machine reaches all alike; the table gives the median of the rounds' target
tokens/s and each model's ratio to the plain one at that precision.  ctxnmt trains as its
trainer does (training.precision: autocast with its GPU paths; CTXNMT_GPU_FAST=0 without
them), the plain models under plain torch.autocast for bf16.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TINY = ["model.emb_dim=16", "model.hidden_dim=32", "model.att_dim=32", "training.batch_sents=8"]


class PlainRNNsearch(nn.Module):
    """RNNsearch in plain PyTorch modules, nothing fused by hand."""

    def __init__(self, src_vocab: int, tgt_vocab: int, emb: int, hidden: int, att: int, out: int,
                 dropout: float, cgru: bool = False):
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab, emb, padding_idx=0)
        self.tgt_emb = nn.Embedding(tgt_vocab, emb, padding_idx=0)
        self.encoder = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.init = nn.Linear(2 * hidden, hidden)
        self.key = nn.Linear(2 * hidden, att)
        self.query = nn.Linear(hidden, att, bias=False)
        self.v = nn.Linear(att, 1, bias=False)
        self.cgru = cgru
        if cgru:
            self.cell1, self.cell2 = nn.GRUCell(emb, hidden), nn.GRUCell(2 * hidden, hidden)
        else:
            self.cell = nn.GRUCell(emb + 2 * hidden, hidden)
        self.readout = nn.Linear(hidden + emb + 2 * hidden, out)
        self.dropout = nn.Dropout(dropout)
        self.generator = nn.Linear(out, tgt_vocab)

    def encode(self, src, src_mask):
        lengths = src_mask.sum(1).long().cpu()
        packed = pack_padded_sequence(self.src_emb(src), lengths, batch_first=True, enforce_sorted=False)
        states, _ = self.encoder(packed)
        return pad_packed_sequence(states, batch_first=True, total_length=src.size(1))[0]

    def loss(self, src, src_mask, tgt, tgt_mask):
        """Summed cross-entropy over the real target tokens, and their number."""
        h = self.encode(src, src_mask)
        keys = self.key(h)
        m = src_mask.unsqueeze(-1)
        s = torch.tanh(self.init((h * m).sum(1) / m.sum(1)))
        emb = self.tgt_emb(tgt)
        prev = torch.cat([torch.zeros_like(emb[:, :1]), emb[:, :-1]], dim=1)  # y_0 = 0
        padding = src_mask == 0
        states, contexts = [], []
        for y in prev.unbind(1):
            query = self.cell1(y, s) if self.cgru else s
            e = self.v(torch.tanh(keys + self.query(query).unsqueeze(1))).squeeze(-1)
            alpha = torch.softmax(e.masked_fill(padding, float("-inf")), dim=-1)
            c = torch.bmm(alpha.unsqueeze(1), h).squeeze(1)
            s = self.cell2(c, query) if self.cgru else self.cell(torch.cat([y, c], dim=-1), s)
            states.append(s)
            contexts.append(c)
        t = torch.tanh(self.readout(torch.cat([torch.stack(states, 1), prev, torch.stack(contexts, 1)], dim=-1)))
        keep = tgt_mask.bool()
        logits = self.generator(self.dropout(t[keep]))
        return F.cross_entropy(logits.float(), tgt[keep], reduction="sum"), int(keep.sum())


class Trained:
    """One model and precision: how it takes a training step, and its rounds' tokens/s."""

    def __init__(self, name: str, model: nn.Module, precision: str, device: torch.device, graphs: bool = False):
        from benchmarks.common import CtxnmtUpdate
        from ctxnmt.training.precision import Precision

        self.name, self.model, self.precision_name = name, model.to(device), precision
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        self.ctxnmt = not isinstance(model, PlainRNNsearch)
        self.precision = Precision(precision, device)  # ctxnmt: its trainer's mixed precision
        self.graphs = graphs  # training.cuda_graphs
        self.update = CtxnmtUpdate(self.model, self.optimizer, self.precision, graphs) if self.ctxnmt else None
        self.rates: list[float] = []

    def step(self, host, batch) -> int:
        if self.update is not None:
            return self.update(host, batch)[1]
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        dtype = torch.bfloat16 if self.precision_name == "bf16" else None
        with torch.autocast(batch.src.device.type, dtype=dtype, enabled=dtype is not None):
            nll, n = self.model.loss(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask)
        (nll / batch.n_sents).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return n


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_round(entry: Trained, batches, device) -> float:
    sync(device)
    start, tokens = time.perf_counter(), 0
    for host, batch in batches:
        tokens += entry.step(host, batch)
    sync(device)
    return tokens / (time.perf_counter() - start)


def build(cfg, data, precisions: list[str], cgru: bool, graphs: bool) -> list[Trained]:
    from ctxnmt.models.nmt import build_model, count_parameters
    from ctxnmt.models.output import readout_dim

    m, device = cfg.model, torch.device(cfg.training.device)
    entries = []
    for precision in precisions:
        torch.manual_seed(0)
        models = [("ctxnmt", build_model(m, len(data.src_vocab), len(data.tgt_vocab)))]
        for name, cond in [("plain", False)] + ([("plain cGRU", True)] if cgru else []):
            models.append((name, PlainRNNsearch(len(data.src_vocab), len(data.tgt_vocab), m.emb_dim, m.hidden_dim,
                                                m.att_dim, readout_dim(m), m.dropout_out, cond)))
        if graphs and device.type == "cuda":
            torch.manual_seed(0)
            models.insert(1, ("ctxnmt graphs", build_model(m, len(data.src_vocab), len(data.tgt_vocab))))
        for name, model in models:
            entries.append(Trained(name, model, precision, device, graphs=name == "ctxnmt graphs"))
            print(f"{name} ({precision}): {count_parameters(model) / 1e6:.1f}M parameters", file=sys.stderr)
    return entries


def print_table(entries: list[Trained], tokens_per_batch: float, sents_per_batch: float) -> None:
    plain = {e.precision_name: statistics.median(e.rates) for e in entries if e.name == "plain"}
    head = f"{'model':<13} {'precision':<9} {'train tok/s':>12} {'ratio to plain':>15}  rounds"
    print(head)
    print("-" * len(head))
    for e in entries:
        rate = statistics.median(e.rates)
        runs = ", ".join(f"{r:.0f}" for r in e.rates)
        print(f"{e.name:<13} {e.precision_name:<9} {rate:>12.0f} {rate / plain[e.precision_name]:>15.2f}  {runs}")
    print(f"\n{sents_per_batch:.0f} sentences ≈ {tokens_per_batch:.0f} target tokens per batch; median of "
          f"{len(entries[0].rates)} interleaved rounds; ctxnmt's GPU paths "
          f"{'off (CTXNMT_GPU_FAST=0)' if not _gpu_paths() else 'on'}")


def _gpu_paths() -> bool:
    from ctxnmt.models import functional

    return functional.GPU_PATHS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs/rnnsearch.yaml"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16")
    parser.add_argument("--batches", type=int, default=10, help="timed training batches per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches per model first")
    parser.add_argument("--cgru", action="store_true", help="also a plain model with dl4mt's conditional GRU")
    parser.add_argument("--graphs", action="store_true",
                        help="also ctxnmt with training.cuda_graphs (CUDA only; each timed shape captured first)")
    parser.add_argument("--tiny", action="store_true",
                        help="embeddings 16, hidden 32, 8 sentences a batch, 2 batches × 2 rounds: a smoke test on any device")
    args = parser.parse_args()
    from benchmarks.common import first_batches, prepared_data
    from ctxnmt.config import load_config
    from ctxnmt.data.batching import make_batch

    if args.tiny:
        args.batches, args.rounds, args.warmup = 2, 2, 1
    cfg = load_config(args.config, (TINY if args.tiny else []) + [f"training.device={args.device}"])
    device = torch.device(args.device)
    data = prepared_data(cfg)
    index = first_batches(cfg, data.train, args.warmup + args.batches)
    hosts = [make_batch(i, data.train.src, data.train.tgt) for i in index]
    batches = [(host, host.to(device)) for host in hosts]
    warmup, timed = batches[: args.warmup], batches[args.warmup:]
    entries = build(cfg, data, args.precisions.split(","), args.cgru, args.graphs)
    for entry in entries:
        for host, batch in warmup + (timed if entry.graphs else []):
            entry.step(host, batch)
    for r in range(args.rounds):
        for entry in entries:
            entry.rates.append(run_round(entry, timed, device))
        print(f"round {r + 1}: " + ", ".join(f"{e.name} {e.precision_name} {e.rates[-1]:.0f}" for e in entries),
              file=sys.stderr)
    tokens = sum(int(b.tgt_mask.sum()) for b, _ in timed) / len(timed)
    print_table(entries, tokens, sum(b.n_sents for b, _ in timed) / len(timed))


if __name__ == "__main__":
    main()
