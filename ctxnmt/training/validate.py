"""Validation: dev perplexity under teacher forcing and dev BLEU with beam search."""
from __future__ import annotations

import math

import torch

from ctxnmt.config import Config
from ctxnmt.data.batching import epoch_batches, make_batch
from ctxnmt.data.documents import check_document_ids, other_document_sentences, previous_sentences
from ctxnmt.data.prepare import length_ratios, split_paths
from ctxnmt.data.words import WordBoundaries
from ctxnmt.decoding.length import length_control, uses_ratios
from ctxnmt.decoding.translator import translate_ids
from ctxnmt.errors import DataError
from ctxnmt.evaluation.metrics import bleu


def document_context(split, config: Config, name: str, whose: str = "own") -> list[list[int]] | None:
    """Each sentence's previous sentences in `split` for a document-context model (None for
    a sentence-level one), or with `whose` "other-document" as many from another document
    (training.document_context); a DataError if the split has no document ids."""
    if not config.model.uses_document:
        return None
    if split.docs is None:
        path = split_paths(config.data, name)[2]
        raise DataError(f"{path}: no such file; a document-context model (model.doc_*) needs document ids "
                        f"for the {name} split")
    where = str(split_paths(config.data, name)[2]) + (" (line numbers of kept pairs)" if name == "train" else "")
    check_document_ids(split.docs, where)
    if whose == "other-document":
        try:
            return other_document_sentences(split.docs, config.model.doc_sents, config.training.seed)
        except DataError as err:
            raise DataError(f"{where}: {err}") from None
    return previous_sentences(split.docs, config.model.doc_sents)


@torch.no_grad()
def dev_perplexity(model, src: list[list[int]], tgt: list[list[int]], batch_tokens: int, batch_sents: int,
                   device, context: list[list[int]] | None = None, k: int = 0) -> float:
    """Perplexity over the dev pairs with a non-empty source: an empty source is all padding,
    with no attention distribution and so no conditional to score (it translates as empty)."""
    model.eval()
    total, tokens = 0.0, 0
    batches = epoch_batches([len(s) for s in src], [len(t) for t in tgt], batch_tokens, batch_sents, 0, 0,
                            shuffle=False)
    for index in batches:
        index = [i for i in index if src[i]]
        if not index:
            continue
        b = make_batch(index, src, tgt, context, k).to(device)
        nll, n = model.loss(b.src, b.src_mask, b.tgt, b.tgt_mask, context=b.context)
        total, tokens = total + float(nll), tokens + n
    return math.exp(min(total / max(tokens, 1), 50.0))


def _length(config: Config, data):
    """The length settings `translate` will use, the training data's length ratios included."""
    dec = config.decoding
    return length_control(dec, length_ratios(data.train, data.src_vocab, data.tgt_vocab) if uses_ratios(dec) else None,
                          words=WordBoundaries.of(data.src_vocab, data.tgt_vocab) if dec.length_ratio_penalty else None)


def validate(model, data, config: Config, device) -> dict[str, float]:
    """{'ppl': …, 'bleu': …} on the dev set (BLEU only if training.valid_bleu)."""
    t = config.training
    dev = data.dev
    n = t.valid_max_sents or len(dev.src)
    k = config.model.doc_sents
    context = document_context(dev, config, "dev")
    context = context[:n] if context is not None else None  # context lies before a sentence: still in dev[:n]
    result = {"ppl": dev_perplexity(model, dev.src[:n], dev.tgt[:n], t.batch_tokens, t.batch_sents, device,
                                    context, k)}
    if t.valid_bleu:
        sentences = None if context is None else [[dev.src[j] for j in c] for c in context]
        hyps = translate_ids(model, dev.src[:n], data.preprocessor, data.tgt_vocab, config.decoding,
                             beam=t.valid_beam, device=device, context=sentences, length=_length(config, data))
        result["bleu"] = bleu([h.text for h in hyps], dev.raw_tgt[:n]).value
    model.train()
    return result
