"""Set-up shared by the benchmarks: prepared data, the model, the first training batches, test sources.

Every benchmark with the same data settings shares one prepared directory under
runs/bench-prep, keyed by the data fingerprint, so the corpus is tokenised and BPE
is learnt once.  Only ctxnmt functions that older revisions also have are used here,
because benchmarks/compare_revisions.py calls these helpers with an older
revision's package on the path.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREP_ROOT = ROOT / "runs" / "bench-prep"


def prepared_data(cfg):
    """The prepared corpus and vocabularies for `cfg.data` (cfg.model_dir is pointed at the shared copy)."""
    from ctxnmt.data.prepare import data_fingerprint, prepare

    cfg.model_dir = str(PREP_ROOT / data_fingerprint(cfg.data))
    return prepare(cfg, log=lambda message: print(message, file=sys.stderr))


def bench_model(cfg, data, checkpoint: str | None = None, strict: bool = False):
    """The config's model for these vocabularies, with `checkpoint`'s weights where given.
    Not strict by default: a variant keeps its extra parameters (e.g. W_y, v), and those
    whose shape differs from the baseline's (a hyper-gated GRU's stacked gates), at their
    initial values and otherwise decodes with a trained baseline's weights, so output
    lengths are alike; those left initialised are reported on stderr."""
    from ctxnmt.models.nmt import build_model
    from ctxnmt.models.migrations import load_model_checkpoint

    model = build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab))
    if checkpoint:
        saved = load_model_checkpoint(checkpoint)["model"]
        if not strict:
            shapes = {k: v.shape for k, v in model.state_dict().items()}
            saved = {k: v for k, v in saved.items() if shapes.get(k, v.shape) == v.shape}
        missing, _ = model.load_state_dict(saved, strict=strict)
        if missing:
            print(f"not in the checkpoint, left initialised: {', '.join(missing)}", file=sys.stderr)
    return model


def first_batches(cfg, train, count: int) -> list[list[int]]:
    """Sentence indices of the first `count` training batches of epoch 1 (the same for every
    config with the same data and batching settings)."""
    from ctxnmt.data.batching import epoch_batches

    t = cfg.training
    return epoch_batches([len(s) for s in train.src], [len(s) for s in train.tgt], t.batch_tokens, t.batch_sents,
                         t.seed, 0)[:count]


def test_sources(cfg, data, count: int | None = None) -> list[list[int]]:
    """The first `count` test sentences (all if None) as source id sequences."""
    from ctxnmt.data.prepare import encode_split, read_split

    test = read_split(cfg.data, "test")
    n = len(test.src) if count is None else min(count, len(test.src))
    return list(encode_split(data.preprocessor, data.src_vocab, data.tgt_vocab, test.src[:n], test.tgt[:n]).src)


class CtxnmtUpdate:
    """One training update of a ctxnmt model as its trainer takes it: Adam (or the optimiser
    given), the config's mixed precision, the loss averaged over the batch's sentences; with
    `graphs`, through CUDA graphs (training.cuda_graphs), the batch handed over from the host."""

    def __init__(self, model, optimizer, precision, graphs: bool = False, label_smoothing: float = 0.0,
                 clip_norm: float = 1.0):
        from ctxnmt.training.graphs import GraphedSteps

        self.model, self.optimizer, self.precision = model, optimizer, precision
        self.label_smoothing, self.clip_norm = label_smoothing, clip_norm
        self.graphs = GraphedSteps(model, label_smoothing, lambda: precision.autocast(cache=False)) if graphs else None

    def __call__(self, host, on_device=None) -> tuple["torch.Tensor", int]:
        """The batch's summed loss and target tokens; `host`: the batch on the host,
        `on_device`: the same batch already on the model's device (eager updates use it)."""
        self.model.train()
        tokens = int(host.tgt_mask.sum())
        if self.graphs is not None:
            self.graphs.zero_grad()
            nll = self.graphs.forward_backward(host, 1.0 / host.n_sents)
        else:
            batch = on_device if on_device is not None else host.to(next(self.model.parameters()).device)
            self.optimizer.zero_grad(set_to_none=True)
            with self.precision.autocast():
                nll, _ = self.model.loss(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask, self.label_smoothing)
            self.precision.backward(nll / batch.n_sents)
        self.precision.step(self.optimizer, self.model.parameters(), self.clip_norm)
        return nll, tokens
