"""Stacked bi-RNN and CAEncoder (fcae, bcae) encoders, with every cell, against the
literal per-step references; padding; sizes and parameter counts."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.models.nmt import build_model, count_parameters
from ctxnmt.models.registry import CELLS, ENCODERS
from tests.models import reference as ref
from tests.models.test_rnnsearch import SRC, TGT, batch_logprobs, small_model

ENCODER_NAMES = ["birnn", "stacked-birnn", "fcae", "bcae"]


def test_every_encoder_is_tested():
    assert ENCODERS.names() == sorted(ENCODER_NAMES)


@pytest.mark.parametrize("cell", CELLS.names())
@pytest.mark.parametrize("encoder", ENCODER_NAMES)
def test_encoder_matches_reference_in_padded_batch(encoder, cell):
    model = small_model(encoder=encoder, cell=cell, encoder_layers=3)
    src, mask = pad(SRC)
    with torch.no_grad():
        annotations = model.encoder(model.src_emb(src), mask)
        assert annotations.size(-1) == model.encoder.out_dim
        for b, ids in enumerate(SRC):
            torch.testing.assert_close(annotations[b, : len(ids)], ref.encode(model, ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("encoder", ENCODER_NAMES)
def test_sentence_alone_equals_sentence_in_padded_batch(encoder):
    model = small_model(encoder=encoder, cell="adaptive-gru")
    src, mask = pad(SRC)
    with torch.no_grad():
        batch = model.encoder(model.src_emb(src), mask)
        for b, ids in enumerate(SRC):
            alone, alone_mask = pad([ids])
            torch.testing.assert_close(batch[b, : len(ids)], model.encoder(model.src_emb(alone), alone_mask)[0],
                                       atol=1e-6, rtol=0)


@pytest.mark.parametrize("encoder", ["stacked-birnn", "fcae", "bcae"])
def test_whole_model_matches_reference(encoder):
    model = small_model(encoder=encoder)
    logp, alpha = batch_logprobs(model, SRC, TGT)
    for b, (s, t) in enumerate(zip(SRC, TGT)):
        ref_logp, ref_alpha = ref.rnnsearch_logprobs(model, s, t)
        torch.testing.assert_close(logp[b, : len(t)], ref_logp, atol=1e-5, rtol=0)
        torch.testing.assert_close(alpha[b, : len(t), : len(s)], ref_alpha, atol=1e-5, rtol=0)


def gru_params(n_in, h, blocks=3):
    return blocks * h * (n_in + h) + blocks * h


@pytest.mark.parametrize("cell, blocks", [("gru", 3), ("adaptive-gru", 4)])
def test_parameter_counts(cell, blocks):
    e, h, a, v = 8, 10, 9, 16
    counts = {name: count_parameters(build_model(ModelConfig.of(emb_dim=e, hidden_dim=h, att_dim=a, encoder=name,
                                                             cell=cell, encoder_layers=3), v, v))
              for name in ENCODER_NAMES}
    assert counts["stacked-birnn"] - counts["birnn"] == 2 * 2 * gru_params(2 * h, h, blocks)  # two more bi-layers
    assert counts["fcae"] == counts["bcae"]
    # CAEncoder: one more (h → h) GRU in the encoder, but annotations of h, not 2h, dimensions, which shrinks
    # every decoder matrix that reads them: W_init, W_e (keys), GRU_2's W, W_ct.
    encoder_growth = gru_params(h, h, blocks)
    decoder_saving = h * h + h * a + h * blocks * h + h * e
    assert counts["fcae"] - counts["birnn"] == encoder_growth - decoder_saving


def test_cae_has_fewer_parameters_in_the_dl4mt_layout():
    """The CAEncoder paper's claim (fewer parameters than the bi-RNN) holds where the attention
    size follows the annotation size, as in dl4mt (2d for the bi-RNN, d for CAEncoder); with a
    fixed att_dim the extra encoder GRU outweighs the decoder's savings."""
    e, h, v = 8, 10, 16

    def count(encoder, att):
        return count_parameters(build_model(ModelConfig.of(emb_dim=e, hidden_dim=h, att_dim=att, encoder=encoder), v, v))

    assert count("bcae", h) < count("birnn", 2 * h)
    assert count("bcae", h) > count("birnn", h)
