"""A 2-to-2 model's document sentences encoded once up front (ctxnmt.decoding.ahead), in
batches other than their waves', give each wave's batch the encoder side that encoding the
batch itself gives (to float rounding), with its target prefix; and a document translation
finds the same hypotheses either way."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.data.batching import pad, pad_context
from ctxnmt.data.vocab import EOS
from ctxnmt.decoding import translator
from ctxnmt.decoding.ahead import EncodedAhead
from ctxnmt.decoding.settings import DecodingConfig
from ctxnmt.decoding.translator import search_ids
from ctxnmt.models.state import Kind
from tests.models.test_concatenation import CONTEXT, SRC, TARGET_CONTEXT, model

# three more sentences, so that the ahead batches (2 rows) mix sentences of different waves
ALL_SRC = SRC + [[5, 9, 11, 13, 6], [7], [8, 8, 12]]
ALL_CONTEXT = CONTEXT + [[[10, 11]], [[12, 13, 6, 7, 8]], []]


def _entries(state, prefix=""):
    for name in state:
        yield prefix + name, state.kind(name), state[name]
    for part_name, part in state.parts.items():
        yield from _entries(part, f"{prefix}{part_name}.")


@torch.no_grad()
def test_a_batch_takes_from_ahead_what_encoding_it_gives():
    m = model(concat_target=True)
    ahead = EncodedAhead(m, ALL_SRC, ALL_CONTEXT, list(range(6)), size=2, beam=3, device="cpu")
    index = [0, 1, 2]  # a wave's batch, in its own order
    src, mask = pad([ALL_SRC[i] for i in index])
    ctx = pad_context([ALL_CONTEXT[i] for i in index], targets=TARGET_CONTEXT)
    direct = m.encode(src, mask, ctx, 3)
    formed = m.encode(src, mask, ctx, 3, ahead=ahead.rows(index, src.size(1)))
    direct_entries, formed_entries = list(_entries(direct)), list(_entries(formed))
    assert [(n, k) for n, k, _ in direct_entries] == [(n, k) for n, k, _ in formed_entries]
    assert "prefix.ids" in {n for n, _, _ in formed_entries}
    real = direct["src_mask"].bool()  # the memory's positions; padding (never attended) may differ:
    assert torch.equal(real, formed["src_mask"].bool())  # encoding pads with W·0 + b, the gathering with 0
    for (name, kind, a), (_, _, b) in zip(direct_entries, formed_entries):
        assert a.shape == b.shape, name
        if kind is Kind.POSITIONS:
            a, b = a[real], b[real]
        if kind is not Kind.SHARED:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("most", [256, 3, 1])  # every wave ahead at once; a wave at a time; none
def test_a_document_translation_finds_the_same_hypotheses_with_or_without_encoding_ahead(monkeypatch, most):
    """Sentences 0-5 in two documents of three: wave t holds sentence t of each (target_of
    names each sentence's previous one).  `most`: the sentences held encoded ahead at once (at
    3, a wave at a time; at 1, none: each wave of two is encoded batch by batch)."""
    m = model(concat_target=True)  # it reads up to two previous sentences; each here has one
    src = ALL_SRC
    context = [[]] + [[src[0]]] + [[src[1]]] + [[]] + [[src[3]]] + [[src[4]]]
    target_of = [[]] + [[[0]]] + [[[1]]] + [[]] + [[[3]]] + [[[4]]]
    dec = DecodingConfig()
    monkeypatch.setattr(translator, "AHEAD_SENTENCES", most)
    made = []
    real = translator.EncodedAhead
    monkeypatch.setattr(translator, "EncodedAhead", lambda *args: made.append(args[3]) or real(*args))
    up_front = search_ids(m, src, dec, beam=3, batch_size=2, context=context, target_of=target_of)
    assert made == {256: [[0, 3, 1, 4, 2, 5]], 3: [[0, 3], [1, 4], [2, 5]], 1: []}[most]
    monkeypatch.setattr(translator, "EncodedAhead", lambda *args, **kwargs: None)
    wave_by_wave = search_ids(m, src, dec, beam=3, batch_size=2, context=context, target_of=target_of)
    assert [[h.tokens for h in hyps] for hyps in up_front] == [[h.tokens for h in hyps] for hyps in wave_by_wave]
    for a, b in zip(up_front, wave_by_wave):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
    assert all(hyps and hyps[0].tokens[-1:] != [EOS] for hyps in up_front)  # searched: tokens without </s>


def test_a_model_whose_encoder_reads_the_previous_translations_is_encoded_wave_by_wave(monkeypatch):
    """The hierarchical model with a target summary (s-hier-to-2) reads the previous
    translations in `encode`: its batches cannot be encoded before them, so search never
    encodes ahead for it, while 2-to-2 concatenation's target side is only the decoder's
    prefix."""
    from ctxnmt.config import ModelConfig
    from ctxnmt.models.nmt import build_model

    torch.manual_seed(0)
    hierarchical = build_model(ModelConfig.of(emb_dim=16, hidden_dim=24, att_dim=20, doc_aux="gated-aux",
                                              doc_init_dec=True, doc_target=True), 30, 30).eval()
    assert hierarchical.encoding_reads_target and not model(concat_target=True).encoding_reads_target
    made = []
    monkeypatch.setattr(translator, "EncodedAhead", lambda *args: made.append(args[3]))
    context = [[], [ALL_SRC[0]], [ALL_SRC[1]]]
    search_ids(hierarchical, ALL_SRC[:3], DecodingConfig(), beam=2, context=context,
               target_of=[[], [[0]], [[1]]])
    assert made == []
