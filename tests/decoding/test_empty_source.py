"""An empty source through the Python decoding API (search_ids, translate_ids: what
validation decodes with) comes back as an empty translation, never a crash, NaN or
garbage, and the non-empty sentences batched with it decode as they do alone."""
from __future__ import annotations

import math

import pytest
import torch

from ctxnmt.config import DecodingConfig, ModelConfig
from ctxnmt.data.vocab import EOS, Vocab
from ctxnmt.decoding.translator import search_ids, translate_ids
from ctxnmt.models.nmt import build_model

VARIANTS = {"cgru": {}, "mean": dict(target_context="mean"), "memory-rnn": dict(decoder="memory-rnn"),
            "adaptive": dict(cell="adaptive-gru", output="adaptive")}
SOURCES = [[5, 6, 7, 8, 9], [], [10, 11], [], [4, 12, 13]]  # empties between, and after the shortest


def model_of(variant: str):
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8, init="pytorch", **VARIANTS[variant]),
                        16, 16)
    with torch.no_grad():  # a strong bias to EOS keeps random outputs short and varied
        model.generator.bias[EOS] += 1.5
    return model.eval()


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_an_empty_source_gets_no_hypothesis_and_the_others_are_unaffected(variant, beam):
    model, dec = model_of(variant), DecodingConfig()
    found = search_ids(model, SOURCES, dec, beam, nbest=beam, return_attention=True)
    assert found[1] == [] and found[3] == []
    for src, hyps in zip(SOURCES, found):
        if not src:
            continue
        alone = search_ids(model, [src], dec, beam, nbest=beam, return_attention=True)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-5)
        assert all(math.isfinite(h.score) and torch.isfinite(h.attention).all() for h in hyps)


def test_only_empty_sources():
    assert search_ids(model_of("cgru"), [[], []], DecodingConfig(), beam=2) == [[], []]


class Words:
    """The preprocessor's decode for already tokenised output: words joined by spaces."""

    @staticmethod
    def decode(tokens, side):
        return " ".join(tokens)


@pytest.mark.parametrize("beam", [1, 3])
def test_validation_decoding_gives_an_empty_line_for_an_empty_source(beam):
    model, dec = model_of("mean"), DecodingConfig()
    vocab = Vocab.build([[f"w{i}" for i in range(12)]])
    assert len(vocab) == 16
    out = translate_ids(model, SOURCES, Words(), vocab, dec, beam)
    assert [t.text for t in out][1::2] == ["", ""] and out[1].nbest == []
    for src, translation in zip(SOURCES, out):
        if src:
            assert translation.text == translate_ids(model, [src], Words(), vocab, dec, beam)[0].text
            assert translation.nbest and math.isfinite(translation.score)  # searched, unlike the empty ones
