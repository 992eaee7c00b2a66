"""What search collects besides source attention (Searchable.signals): for the hypothesis it
chooses, target-side attention and the adaptive gates equal the teacher-forced analyses on the
same output for a sentence model; a document model's are those it translated with, its
context read; and nothing is collected (or recorded by the model) unless attention is asked."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ctxnmt.analysis.forced import target_attention
from ctxnmt.analysis.gates import encoder_gates, output_weights
from ctxnmt.config import load_config
from ctxnmt.data.batching import pad, pad_context
from ctxnmt.data.vocab import EOS
from ctxnmt.decoding.beam import search_batches
from ctxnmt.decoding.graphs import GraphedSearch
from tests.decoding.test_graphs import stand_in_capture
from tests.models.test_rnnsearch import SRC, small_model

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
COMPONENTS = ("encoder", "decoder", "cell", "target_context", "output")


def model_of(config: str, **overrides):
    """A tiny model with the components of configs/`config` (its sizes are the tests')."""
    model = load_config(CONFIGS / config).model.to_dict()
    return small_model(**{**{key: model[key] for key in COMPONENTS}, **overrides})


def chosen(model, beam=3, context=None, return_attention=True):
    src, mask = pad(SRC)
    found = search_batches(model, [(list(range(len(SRC))), src, mask, context)], beam, nbest=1,
                           return_attention=return_attention)
    return [found[i][0] for i in range(len(SRC))]


def assert_forced_values(model, hyps):
    """Each hypothesis's signals are the forced pass's on its own output (an output cut at the
    length limit has no </s> step: its rows are the forced pass's first ones)."""
    capabilities = model.capabilities
    for src, h in zip(SRC, hyps):
        T = h.attention.size(0)
        if capabilities.target_attention:
            forced = target_attention(model, [src], [h.tokens + [EOS]])[0][:T, :T]
            torch.testing.assert_close(h.signals["target_attention"], forced, atol=1e-5, rtol=0)
        if capabilities.adaptive_output:
            forced = output_weights(model, [src], [h.tokens])[0][:T]
            torch.testing.assert_close(h.signals["output_weights"], forced, atol=1e-5, rtol=0)
        assert set(h.signals.get("encoder_gates", {})) == set(capabilities.encoder_hyper_gates)
        for name, values in encoder_gates(model, [src]).items():
            torch.testing.assert_close(h.signals["encoder_gates"][name], values[0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("config", ["self-attentive-residual-small.yaml", "adaptive-both-small.yaml"])
@pytest.mark.parametrize("beam", [1, 3])
def test_the_chosen_hypothesis_shows_what_the_forced_pass_shows(config, beam):
    model = model_of(config)
    hyps = chosen(model, beam)
    assert all(h.signals for h in hyps)
    assert_forced_values(model, hyps)


def test_a_summary_whose_attention_reads_the_decoder_state_too():
    model = small_model(target_context="self-attentive-scope", cell="adaptive-gru", output="adaptive")
    assert_forced_values(model, chosen(model))


def test_graphed_search_collects_the_same_values():
    model = model_of("adaptive-both-small.yaml", target_context="self-attentive")
    eager = chosen(model)
    graphed = GraphedSearch(model, capture=stand_in_capture)
    found = chosen(graphed)
    assert graphed.on and graphed.captured >= 1  # recording keeps the step's state steady
    for a, b in zip(eager, found):
        assert a.tokens == b.tokens and a.signals.keys() == b.signals.keys()
        for name in ("target_attention", "output_weights"):
            torch.testing.assert_close(a.signals[name], b.signals[name], atol=1e-6, rtol=0)


def test_nothing_is_collected_unless_attention_is_asked():
    model = model_of("adaptive-both-small.yaml", target_context="self-attentive")
    src, mask = pad(SRC)
    assert all(h.signals == {} for h in chosen(model, return_attention=False))
    enc = model.encode(src, mask)
    assert "record" not in model.init_state(enc, 3).parts and "encoder_gates" not in enc.parts


def test_a_document_model_shows_the_values_it_translated_with():
    """With empty context (D = 0) the hierarchical model computes the sentence model's function,
    so its signals are the forced pass's; with previous sentences they are others."""
    model = small_model(target_context="self-attentive-scope", cell="adaptive-gru", output="adaptive",
                        doc_init_enc=True, doc_init_dec=True, doc_aux="gated-aux")
    empty = chosen(model, context=pad_context([[] for _ in SRC]))
    assert_forced_values(model, empty)
    read = chosen(model, context=pad_context([[[4, 9, 5]], [[7, 7]], [[10, 11, 12, 13]]]))
    for without, with_context in zip(empty, read):
        assert not torch.allclose(without.signals["encoder_gates"]["forward"],
                                  with_context.signals["encoder_gates"]["forward"])
        if without.tokens == with_context.tokens:
            assert not torch.allclose(without.signals["output_weights"], with_context.signals["output_weights"])


def test_a_concatenation_model_shows_the_gates_of_its_own_positions():
    """The encoder reads the context before the sentence: the gates returned are the sentence's,
    the left-to-right recurrence's with the context read first, the right-to-left one's before it."""
    model = small_model(context="concat", cell="adaptive-gru")
    hyps = chosen(model, context=pad_context([[[4, 9, 5]], [], [[10, 11]]]))
    for src, h in zip(SRC, hyps):
        assert {name: len(values) for name, values in h.signals["encoder_gates"].items()} == \
            {"forward": len(src), "backward": len(src)}
    alone = chosen(model, context=pad_context([[] for _ in SRC]))
    torch.testing.assert_close(alone[1].signals["encoder_gates"]["forward"],
                               hyps[1].signals["encoder_gates"]["forward"], atol=1e-6, rtol=0)  # no context
    torch.testing.assert_close(alone[0].signals["encoder_gates"]["backward"],
                               hyps[0].signals["encoder_gates"]["backward"], atol=1e-6, rtol=0)
    assert not torch.allclose(alone[0].signals["encoder_gates"]["forward"],
                              hyps[0].signals["encoder_gates"]["forward"])
