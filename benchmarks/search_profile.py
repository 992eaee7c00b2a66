"""Where a beam search step's time goes: the model's step against search's bookkeeping.

    python benchmarks/search_profile.py configs/rnnsearch.yaml --checkpoint runs/x/best.pt \
        --device cuda --beam 5 --decode-sents 200 --decode-batch 100 [--graphs] [--bf16]

Issue 33 asks for beam 5 at 30k target tok/s, and bf16 1.3× as fast as float32.  CUDA
graphs of the step (`decoding.cuda_graphs`) made the model's part one launch; what is left
of each step is search's own work on the host: choosing candidates, reordering beams,
collecting finished hypotheses (ctxnmt.decoding.beam).  Whether capturing that too would
pay depends on its share of the step, which this measures.  For each setting (plain, and
with --graphs also graphed) it decodes once to warm up (and capture), then:

  - `plain run`: the search as `ctxnmt translate` runs it, timed as a whole;
  - `instrumented run`: the same search with the device synchronised at the end of every
    model step and encoding, so that the step's time (launches, device work, graph replay
    and its copies) is counted apart from the rest, search's bookkeeping (host and device),
    and the encoder's apart from both;
  - per step, the operators search itself dispatches (ATen calls outside the model step),
    split into those that launch work on the device, those on host tensors, and views.

On a CPU it runs as well: the split is then of CPU time, and what would launch on a GPU
counts as host operators.  Numbers are
ratios within one run; the instrumented run's synchronisation adds a little to each step.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.speed import sync  # noqa: E402 (after the path)


class TimedSteps:
    """A Searchable whose steps (`step_candidates`, or `step_candidates_with_end` under a length-ratio prior)
    are timed (device synchronised at their end)."""

    def __init__(self, model, device, record):
        self.model, self.device, self.record = model, device, record
        self.seconds, self.encode_seconds, self.steps = 0.0, 0.0, 0

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def eval(self):  # search_ids puts its model in eval mode; the wrapped one already is
        return self

    def encode(self, src, src_mask, context=None, beam: int = 1):
        return self._timed("encode_seconds", self.model.encode, src, src_mask, context, beam)

    def init_state(self, enc, beam: int = 1):
        return self.model.init_state(enc, beam)

    def memory_lengths(self, enc):
        return self.model.memory_lengths(enc)

    def step(self, enc, state, prev_tokens):
        self.steps += self.record
        return self._timed("seconds", self.model.step, enc, state, prev_tokens)

    def step_candidates_with_end(self, enc, state, prev_tokens, k):  # what search calls under a length-ratio prior
        self.steps += self.record
        return self._timed("seconds", self.model.step_candidates_with_end, enc, state, prev_tokens, k)

    def step_candidates(self, enc, state, prev_tokens, k):
        self.steps += self.record
        return self._timed("seconds", self.model.step_candidates, enc, state, prev_tokens, k)

    def _timed(self, total: str, call, *args):
        if not self.record:
            return call(*args)
        sync(self.device)
        start = time.perf_counter()
        out = call(*args)
        sync(self.device)
        setattr(self, total, getattr(self, total) + time.perf_counter() - start)
        return out


def count_search_ops(search, steps_model: TimedSteps) -> tuple[Counter, int]:
    """ATen calls that `search()` dispatches outside the model's step, by kind, and the steps."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    inside = [False]
    counts: Counter = Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not inside[0]:
                tensors = [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]
                if torch.Tag.view_copy in func.tags or any(t._is_view() for t in tensors) or func.is_view:
                    counts["views"] += 1
                elif any(t.device.type != "cpu" for t in tensors):
                    counts["device"] += 1
                else:
                    counts["host"] += 1
            return out

    model = steps_model.model
    steps = [0]

    class Marked:
        def __getattr__(self, name):
            return getattr(model, name)

        def _inside(self, call, *args):
            inside[0] = True
            steps[0] += 1
            try:
                return call(*args)
            finally:
                inside[0] = False

        def step_candidates(self, *args):
            return self._inside(model.step_candidates, *args)

        def step(self, *args):
            return self._inside(model.step, *args)

        def step_candidates_with_end(self, *args):
            return self._inside(model.step_candidates_with_end, *args)

    steps_model.model = Marked()
    try:
        with Count():
            search()
    finally:
        steps_model.model = model
    return counts, steps[0]


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks.common import bench_model, prepared_data, test_sources
    from ctxnmt.config import load_config
    from ctxnmt.data.prepare import length_ratios
    from ctxnmt.data.words import WordBoundaries
    from ctxnmt.decoding.graphs import GraphedSearch
    from ctxnmt.decoding.length import length_control
    from ctxnmt.decoding.translator import search_ids

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--checkpoint", help="trained weights (a random model runs to the length limit)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--decode-sents", type=int, default=200)
    parser.add_argument("--decode-batch", type=int, default=100)
    parser.add_argument("--graphs", action="store_true", help="also with the search step from CUDA graphs")
    parser.add_argument("--bf16", action="store_true", help="search under bf16 autocast (decoding.precision bf16)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default: %(default)s)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = load_config(args.config, args.set)
    device = torch.device(args.device)
    data = prepared_data(cfg)
    model = bench_model(cfg, data, args.checkpoint).to(device).eval()
    sources = test_sources(cfg, data, args.decode_sents)
    dec = cfg.decoding
    dec.cuda_graphs = False  # the graphs are put under the timing wrapper here, not by search_ids
    dec.precision = "bf16" if args.bf16 else "fp32"
    # max_len_rule data: the training pairs' ratios (with words, for a length-ratio prior)
    length = length_control(dec, length_ratios(data.train, data.src_vocab, data.tgt_vocab, cfg.data.subwords),
                            words=WordBoundaries.of(data.src_vocab, data.tgt_vocab, cfg.data.subwords))
    settings = [("eager", model)] + ([("graphs", GraphedSearch(model))] if args.graphs else [])
    print(f"{args.config}, {device}, beam {args.beam}, {len(sources)} sentences in batches of "
          f"{args.decode_batch}, {'bf16' if args.bf16 else 'fp32'}")
    for name, searched in settings:
        timed = TimedSteps(searched, device, record=False)

        def search():
            return search_ids(timed, sources, dec, args.beam, batch_size=args.decode_batch, device=device,
                              length=length)

        search()  # warm-up (and the captures)
        sync(device)
        start = time.perf_counter()
        hyps = search()
        sync(device)
        plain = time.perf_counter() - start
        tokens = sum(len(h[0].tokens) + 1 for h in hyps if h)
        timed.record = True
        start = time.perf_counter()
        search()
        sync(device)
        total = time.perf_counter() - start
        timed.record = False
        ops, steps = count_search_ops(search, timed)
        step_ms = 1000 * timed.seconds / timed.steps
        rest_ms = 1000 * (total - timed.seconds - timed.encode_seconds) / timed.steps
        print(f"{name}: plain run {plain:.3f} s ({tokens / plain:,.0f} tok/s); instrumented {total:.3f} s, "
              f"encoding {timed.encode_seconds:.3f} s; {timed.steps} steps: model step {step_ms:.3f} ms, "
              f"search's bookkeeping {rest_ms:.3f} ms "
              f"({rest_ms / (step_ms + rest_ms):.0%} of a step); search's own operators per step: "
              f"{ops['device'] / steps:.1f} on the device, {ops['host'] / steps:.1f} on the host, "
              f"{ops['views'] / steps:.1f} views")
    return 0


if __name__ == "__main__":
    sys.exit(main())
