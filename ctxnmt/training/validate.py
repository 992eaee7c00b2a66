"""Validation: dev perplexity under teacher forcing and dev BLEU with beam search."""
from __future__ import annotations

import math

import torch

from ctxnmt.config import Config
from ctxnmt.data.batching import epoch_batches, make_batch


@torch.no_grad()
def dev_perplexity(model, src: list[list[int]], tgt: list[list[int]], batch_tokens: int, batch_sents: int,
                   device) -> float:
    model.eval()
    total, tokens = 0.0, 0
    batches = epoch_batches([len(s) for s in src], [len(t) for t in tgt], batch_tokens, batch_sents, 0, 0,
                            shuffle=False)
    for index in batches:
        b = make_batch(index, src, tgt).to(device)
        nll, n = model.loss(b.src, b.src_mask, b.tgt, b.tgt_mask)
        total, tokens = total + float(nll), tokens + n
    return math.exp(min(total / max(tokens, 1), 50.0))


def validate(model, data, config: Config, device) -> dict[str, float]:
    """{'ppl': …, 'bleu': …} on the dev set (BLEU only if training.valid_bleu)."""
    t = config.training
    dev = data.dev
    n = t.valid_max_sents or len(dev.src)
    result = {"ppl": dev_perplexity(model, dev.src[:n], dev.tgt[:n], t.batch_tokens, t.batch_sents, device)}
    if t.valid_bleu:
        from ctxnmt.decoding.translator import translate_ids
        from ctxnmt.evaluation.metrics import bleu

        hyps = translate_ids(model, dev.src[:n], data.preprocessor, data.tgt_vocab, config.decoding,
                             beam=t.valid_beam, device=device)
        result["bleu"] = bleu([h.text for h in hyps], dev.raw_tgt[:n]).value
    model.train()
    return result
