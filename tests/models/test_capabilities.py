"""Capabilities are declared by the parts (ctxnmt.models.capabilities) and agree with what
the parts compute: the recurrences an encoder names are those it traces, the hyper-gated
ones are those with a hyper-gate, and a summary or output layer declared without its
weights refuses to give them."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.data.batching import pad
from ctxnmt.decoding.ensemble import Ensemble
from ctxnmt.decoding.searchable import Searchable, TranslationModel
from ctxnmt.errors import ConfigError
from ctxnmt.models.capabilities import Capabilities
from ctxnmt.models.registry import ENCODERS, OUTPUTS, TARGET_CONTEXTS
from tests.models.test_rnnsearch import SRC, TGT, small_model


def test_the_baseline_declares_nothing():
    assert small_model().capabilities == Capabilities()


def test_every_switch_is_declared():
    caps = small_model(cell="adaptive-gru", target_context="self-attentive", output="adaptive",
                       encoder="stacked-birnn", encoder_layers=2, doc_aux="gated-aux").capabilities
    names = ("layer1-forward", "layer1-backward", "layer2-forward", "layer2-backward")
    assert caps.encoder_hyper_gates == names
    assert caps.decoder_hyper_gates == ("gru1", "gru2")
    assert caps.target_attention and caps.adaptive_output and caps.document_context
    assert small_model(encoder_cell="gru", cell="adaptive-gru").capabilities.encoder_hyper_gates == ()


@pytest.mark.parametrize("encoder", ENCODERS.names())
def test_an_encoder_traces_the_recurrences_it_names(encoder):
    model = small_model(encoder=encoder, cell="adaptive-gru")
    src, mask = pad(SRC)
    traced = model.encoder.recurrences(model.src_emb(src), mask)
    cells = model.encoder.recurrence_cells()
    assert list(traced) == list(cells) and all(traced[n].cell is cells[n] for n in cells)


def forced(model):
    """The encoder side, the shifted target embeddings and the target mask of SRC and TGT."""
    src, src_mask = pad(SRC)
    tgt, tgt_mask = pad(TGT)
    return model.encode(src, src_mask), model.previous_embeddings(tgt), tgt_mask


@pytest.mark.parametrize("name", TARGET_CONTEXTS.names())
def test_a_summary_has_attention_weights_exactly_where_it_declares_them(name):
    model = small_model(target_context=name)
    if model.capabilities.target_attention:
        T = max(map(len, TGT))
        assert model.decoder.target_attention(*forced(model)).shape == (len(SRC), T, T)
    else:
        with pytest.raises(ConfigError, match="no attention over previous words"):
            model.decoder.target_attention(*forced(model))


@pytest.mark.parametrize("name", OUTPUTS.names())
def test_an_output_layer_has_weights_exactly_where_it_declares_them(name):
    model = small_model(output=name)
    if model.capabilities.adaptive_output:
        weights = model.decoder.output_weights(*forced(model))
        torch.testing.assert_close(weights.sum(0), torch.ones(weights.shape[1:]))
    else:
        with pytest.raises(ConfigError, match="does not weigh its sources"):
            model.decoder.output_weights(*forced(model))


@pytest.mark.parametrize("decoder", ["cgru", "self-attentive-rnn", "memory-rnn"])
def test_every_decoder_and_the_ensemble_are_what_the_translator_needs(decoder):
    model = small_model(decoder=decoder)
    ensemble = Ensemble([model, small_model(doc_init_dec=True)])
    assert isinstance(model, TranslationModel) and isinstance(ensemble, Searchable)
    # the analyses run on one model: an ensemble declares none of its members', but their context
    assert ensemble.capabilities == Capabilities(document_context=True)
