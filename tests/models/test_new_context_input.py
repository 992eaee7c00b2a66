"""docs/new-variant.md, "A new document-context input", done from a test file: one module and
its registry line make `model.context: previous-mean`, which the data side feeds and which
learns from the previous sentence what the sentence alone does not say."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad, pad_context
from ctxnmt.models.context import context_sentences, reads_target_context
from ctxnmt.models.interfaces import ContextNeeds, ContextReader
from ctxnmt.models.nmt import build_model
from ctxnmt.models.registry import CONTEXTS
from tests.decoding.search import search_batch
from tests.training.test_pronoun_from_context import accuracy, trained


@CONTEXTS.register("previous-mean")
class PreviousMean(ContextReader):
    """x'_i = E x_i + mean_j E c_j over the words c_j of the previous source sentence."""

    @classmethod
    def needs(cls, cfg):
        return ContextNeeds(sentences=1)

    @classmethod
    def from_config(cls, cfg, encoder_state_dim, src_vocab_size):
        return cls()

    def encode(self, model, src, src_mask, context, beam=1):
        emb = model.src_emb(src)
        if context is not None:  # one slot: K = 1
            words, mask = model.src_emb(context.ids[:, 0]), context.mask[:, 0].unsqueeze(-1)
            emb = emb + (words * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)
        annotations = model.dropout_hidden(model.encoder(model.dropout_emb(emb), src_mask))
        return model.decoder.prepare(annotations, src_mask, None, beam)


def test_the_data_side_reads_what_the_new_input_needs():
    cfg = ModelConfig.of(context="previous-mean")
    assert context_sentences(cfg) == 1 and not reads_target_context(cfg)


def test_it_searches_with_its_context_and_it_changes_the_output():
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=8, att_dim=8, context="previous-mean"), 20, 20).eval()
    src, mask = pad([[5, 6], [7]])
    ctx = pad_context([[[8, 9]], []])
    with_context = search_batch(model, src, mask, beam=2, context=ctx)
    assert model.capabilities.document_context
    scores = [h[0].score for h in with_context]
    alone = [h[0].score for h in search_batch(model, src, mask, beam=2)]
    assert scores[0] != pytest.approx(alone[0]) and scores[1] == pytest.approx(alone[1])


def test_it_learns_the_pronoun_only_the_previous_sentence_tells():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, target = trained(dict(context="previous-mean"), "source")
    finally:
        torch.set_num_threads(threads)
    assert accuracy(model, target, "source", "own") >= 0.95
