"""Speed of model variants as ratios to the baseline, interleaved in one process.

    python benchmarks/variants.py configs/bench.yaml model.target_context=mean model.target_context=self-attentive
    python benchmarks/variants.py configs/bench.yaml --preset encoders-adaptive --rounds 3 --decode-sents 50
    python benchmarks/variants.py configs/bench.yaml --preset target-context --preset encoders-adaptive \
        --preset document --threads 1
    python benchmarks/variants.py configs/bench.yaml model.doc_init_enc=true,model.doc_init_dec=true
    python benchmarks/variants.py configs/rnnsearch-small.yaml --preset reproduction --threads 1 \
        --set model.emb_dim=128 --set model.hidden_dim=256 --set model.att_dim=256 \
        --model-dirs 'runs/exp/reproduction/systems/{name}/seed1'   # the protocol's trained models

Document-context variants (model.doc_*) get each sentence's previous source
sentences, in training and in decoding, from the corpus's .doc files.

On a shared, noisy machine, configs measured one after the other drift by ±10%;
here every variant's training step and decoding batch alternate with the
baseline's on the same batches, so slow spells hit all of them alike.  Reports
parameters, training target tokens/s and beam-5 decoding sentences/s, each with
its ratio to the baseline (the config without overrides).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


# Named variant lists: label -> comma-separated overrides.
PRESETS = {
    "target-context": {  # issue 4: summaries of the previous target words and the decoders compared with them
        "mean": "model.target_context=mean",
        "self-attentive (content)": "model.target_context=self-attentive",
        "memory-rnn": "model.decoder=memory-rnn",
        "self-attentive-rnn": "model.decoder=self-attentive-rnn",
    },
    "document": {  # issue 6: cross-sentence context, K = 3
        "doc init-enc": "model.doc_init_enc=true",
        "doc init-dec": "model.doc_init_dec=true",
        "doc init-both": "model.doc_init_enc=true,model.doc_init_dec=true",
        "doc aux": "model.doc_aux=aux",
        "doc gated-aux": "model.doc_aux=gated-aux",
        "doc init-both gated-aux": "model.doc_init_enc=true,model.doc_init_dec=true,model.doc_aux=gated-aux",
    },
    "reproduction": {  # issue 16: the systems of experiments/reproduction.yaml, on configs/rnnsearch-small.yaml
        "mean-residual": "model.target_context=mean",
        "self-attentive-residual": "model.target_context=self-attentive",
        "memory-rnn": "model.decoder=memory-rnn",
        "adaptive-both": "model.cell=adaptive-gru-balanced,model.output=adaptive",
        "doc-init-both-gated-aux": "model.doc_init_enc=true,model.doc_init_dec=true,model.doc_aux=gated-aux",
        "bcae": "model.encoder=bcae",
        "stacked-birnn": "model.encoder=stacked-birnn",
    },
    "encoders-adaptive": {  # issue 5: context-aware encoders and adaptive weighting
        "stacked-birnn": "model.encoder=stacked-birnn",
        "fcae": "model.encoder=fcae",
        "bcae": "model.encoder=bcae",
        "adaptive-gru encoder": "model.encoder_cell=adaptive-gru",
        "adaptive-gru everywhere": "model.cell=adaptive-gru",
        "adaptive output": "model.output=adaptive",
        "adaptive-both": "model.cell=adaptive-gru,model.output=adaptive",
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("variants", nargs="*", help="comma-separated overrides per variant, e.g. model.cell=gru")
    parser.add_argument("--preset", choices=sorted(PRESETS), action="append", default=[],
                        help="add a named list of variants (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override for every model, the baseline included (e.g. training.batch_sents=20)")
    parser.add_argument("--rounds", type=int, default=8, help="training steps per variant (after 2 warm-up)")
    parser.add_argument("--decode-sents", type=int, default=200)
    parser.add_argument("--decode-batch", type=int, default=50, help="sentences per interleaved decoding chunk")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (0: every core; 1 on a busy machine, where waiting threads spin)")
    parser.add_argument("--checkpoint", help="baseline weights to decode with (loaded non-strictly)")
    parser.add_argument("--model-dirs", metavar="PATTERN",
                        help="each model decodes with its own trained weights, from the model directory "
                             "PATTERN.format(name=VARIANT) (the baseline's name is 'baseline'), loaded strictly")
    args = parser.parse_args()

    import torch

    from benchmarks.common import bench_model, first_batches, prepared_data, test_sources
    from ctxnmt.config import load_config
    from ctxnmt.data.batching import make_batch
    from ctxnmt.data.documents import previous_sentences
    from ctxnmt.data.prepare import read_split
    from ctxnmt.decoding.translator import search_ids
    from ctxnmt.utils.checkpoint import default_checkpoint
    from ctxnmt.models.context import context_sentences
    from ctxnmt.models.nmt import count_parameters

    torch.set_num_threads(args.threads or os.cpu_count())
    variants = {v: v for v in args.variants}
    for preset in args.preset:
        variants |= PRESETS[preset]
    if not variants:
        parser.error("give variants or --preset")
    names = ["baseline"] + list(variants)
    configs = [load_config(args.config, args.set + ([] if n == "baseline" else variants[n].split(","))) for n in names]
    base = configs[0]
    data = prepared_data(base)
    models, optimizers = [], []
    for name, cfg in zip(names, configs):
        torch.manual_seed(0)
        if args.model_dirs:
            model = bench_model(cfg, data, default_checkpoint(Path(args.model_dirs.format(name=name))), strict=True)
        else:
            model = bench_model(cfg, data, args.checkpoint)
        models.append(model)
        optimizers.append(torch.optim.Adam(model.parameters(), lr=1e-5))
    train = data.train
    batches = first_batches(base, train, args.rounds + 2)
    # K → each training sentence's previous sentences, for the document-context variants
    k_of = [context_sentences(cfg.model) for cfg in configs]
    train_context = {k: previous_sentences(train.docs, k) for k in set(k_of) if k}
    train_rate = {n: [] for n in names}
    for r, index in enumerate(batches):
        batch = {k: make_batch(index, train.src, train.tgt, train_context.get(k), k) for k in set(k_of)}
        for name, model, opt, k in zip(names, models, optimizers, k_of):
            model.train()
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            b = batch[k]
            nll, n = model.loss(b.src, b.src_mask, b.tgt, b.tgt_mask, context=b.context)
            (nll / b.n_sents).backward()
            opt.step()
            if r >= 2:
                train_rate[name].append(n / (time.perf_counter() - start))
    src = test_sources(base, data, args.decode_sents)
    k = len(src)
    test = read_split(base.data, "test")  # its document structure, for the document-context variants
    test_context = {K: [[src[j] for j in c] for c in previous_sentences(test.docs[:k], K)]
                    for K in set(k_of) if K}
    decode_rate = {n: [] for n in names}
    for chunk in range(0, k, args.decode_batch):
        piece = src[chunk: chunk + args.decode_batch]
        for name, model, K in zip(names, models, k_of):
            start = time.perf_counter()
            ctx = test_context[K][chunk: chunk + args.decode_batch] if K else None
            search_ids(model, piece, base.decoding, beam=args.beam, batch_size=args.decode_batch, context=ctx)
            decode_rate[name].append(len(piece) / (time.perf_counter() - start))
    train_base = statistics.mean(train_rate["baseline"])
    decode_base = mean(decode_rate["baseline"])
    params_base = count_parameters(models[0])
    print(f"{'variant':<40} {'params':>11} {'ratio':>6} {'train tok/s':>12} {'ratio':>6} {'beam sent/s':>12} "
          f"{'ratio':>6}")
    for name, model in zip(names, models):
        tr, de = statistics.mean(train_rate[name]), mean(decode_rate[name])
        params = count_parameters(model)
        print(f"{name:<40} {params:>11,} {params / params_base:>6.3f} {tr:>12.0f} {tr / train_base:>6.3f} "
              f"{de:>12.1f} {de / decode_base:>6.3f}")
    print(f"\n{args.rounds} interleaved training steps per variant on the first batches of epoch 1; "
          f"beam {args.beam} over {k} test sentences in interleaved chunks of {args.decode_batch}; "
          f"{weights(args)}")


def weights(args) -> str:
    if args.model_dirs:
        return f"each model's own trained weights ({args.model_dirs})"
    return "trained baseline weights" if args.checkpoint else "random weights"


def mean(rates: list[float]) -> float:
    return statistics.mean(rates) if rates else float("nan")  # --decode-sents 0: training only


if __name__ == "__main__":
    main()
