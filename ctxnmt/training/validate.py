"""Validation: dev perplexity under teacher forcing and dev BLEU with beam search."""
from __future__ import annotations

import math

import numpy as np
import torch

from ctxnmt.config import Config
from ctxnmt.data.batching import epoch_batches, make_batch
from ctxnmt.data.documents import ListedContext, PreviousSentences, other_document_sentences
from ctxnmt.data.indexed import Side, TokenArrays
from ctxnmt.data.prepare import split_paths
from ctxnmt.data.words import WordBoundaries
from ctxnmt.decoding.length import length_control, uses_ratios
from ctxnmt.decoding.translator import translate_ids
from ctxnmt.errors import DataError
from ctxnmt.evaluation.metrics import bleu
from ctxnmt.models.context import context_sentences, reads_target_context


def document_context(split: TokenArrays, config: Config, name: str, whose: str = "own"):
    """Where each sentence of `split` finds its previous sentences, for a document-context model
    (None for a sentence-level one), as a source computed per batch (ctxnmt.data.documents);
    with `whose` "other-document", as many from another document (training.document_context).
    A DataError if the split has no usable document ids."""
    k = context_sentences(config.model)
    if not k:
        return None
    path = split_paths(config.data, name)[2]
    if split.docs is None:
        raise _no_document_ids(path, name)
    # prepare drops training pairs, never dev pairs: a dev split's line numbers are its file's
    lines = f"{path} (line numbers of kept pairs)" if name == "train" else str(path)
    if split.doc_problem:
        raise DataError(f"{lines}:{split.doc_problem}")
    if whose == "other-document":
        try:
            return ListedContext(other_document_sentences(split.docs.tolist(), k, config.training.seed), k)
        except DataError as err:
            raise DataError(f"{lines}: {err}") from None
    return PreviousSentences(split.docs, k)


def check_document_files(config: Config) -> None:
    """Refuse a document-context model whose training or dev split has text but no .doc file,
    before anything is prepared (document_context would, once it was).  A split without its
    text is left to prepare: the Bible corpus is built there, .doc files and all."""
    if not context_sentences(config.model):
        return
    for name in ("train", "dev"):
        src, tgt, doc = split_paths(config.data, name)
        if src.is_file() and tgt.is_file() and not doc.is_file():
            raise _no_document_ids(doc, name)


def _no_document_ids(path, name: str) -> DataError:
    return DataError(f"{path}: no such file; a document-context model (model.context) needs document ids "
                     f"for the {name} split")


@torch.no_grad()
def dev_perplexity(model, src: Side, tgt: Side, batch_tokens: int, batch_sents: int, device, context=None,
                   k: int = 0, target_context: bool = False) -> float:
    """Perplexity over the dev pairs with a non-empty source: an empty source is all padding,
    with no attention distribution and so no conditional to score (it translates as empty)."""
    model.eval()
    total, tokens = 0.0, 0
    batches = epoch_batches(src.lens, tgt.lens, batch_tokens, batch_sents, 0, 0, shuffle=False)
    for index in batches:
        index = [i for i in index if src.lens[i]]
        if not index:
            continue
        b = make_batch(index, src, tgt, context, k, target_context).to(device)
        nll, n = model.loss(b.src, b.src_mask, b.tgt, b.tgt_mask, context=b.context)
        total, tokens = total + float(nll), tokens + n
    return math.exp(min(total / max(tokens, 1), 50.0))


def _listed(context, n: int) -> list[list[int]]:
    """The context positions of the first n sentences, as lists (what translation reads)."""
    positions, count = context.positions(np.arange(n))
    return [row[:c].tolist() for row, c in zip(positions, count)]


def _length(config: Config, data):
    """The length settings `translate` will use, the training data's length ratios included."""
    dec = config.decoding
    words = (WordBoundaries.of(data.src_vocab, data.tgt_vocab, data.preprocessor.options.subwords)
             if dec.length_ratio_penalty else None)
    return length_control(dec, data.length_ratios() if uses_ratios(dec) else None, words=words)


def validate(model, data, config: Config, device) -> dict[str, float]:
    """{'ppl': …, 'bleu': …} on the dev set (BLEU only if training.valid_bleu)."""
    t = config.training
    n = min(t.valid_max_sents or len(data.dev), len(data.dev))
    src, tgt = data.dev.src.head(n), data.dev.tgt.head(n)
    k = context_sentences(config.model)
    context = document_context(data.dev, config, "dev")  # context lies before a sentence: still in dev[:n]
    target = reads_target_context(config.model)  # perplexity: the references'; BLEU: its own translations
    result = {"ppl": dev_perplexity(model, src, tgt, t.batch_tokens, t.batch_sents, device, context, k, target)}
    if t.valid_bleu:
        listed = None if context is None else _listed(context, n)
        sentences = None if listed is None else [[src[j] for j in c] for c in listed]
        target_of = [[[j] for j in c] for c in listed] if target else None
        hyps = translate_ids(model, list(src), data.preprocessor, data.tgt_vocab, config.decoding,
                             beam=t.valid_beam, device=device, context=sentences, length=_length(config, data),
                             target_of=target_of)
        result["bleu"] = bleu([h.text for h in hyps], data.references[:n]).value
    model.train()
    return result
