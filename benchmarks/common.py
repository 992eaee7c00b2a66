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
    from ctxnmt.utils.checkpoint import load_checkpoint

    model = build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab))
    if checkpoint:
        saved = load_checkpoint(checkpoint)["model"]
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
    return encode_split(data.preprocessor, data.src_vocab, data.tgt_vocab, test.src[:n], test.tgt[:n]).src
