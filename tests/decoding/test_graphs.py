"""CUDA graphs of the search step (ctxnmt/decoding/graphs.py), on the CPU: a stand-in for
the capture runs the step once into fixed output tensors and, at each replay, runs it again
on the graph's fixed inputs and writes the results into those same tensors, as a CUDA
graph's replay does.  So everything but the capture itself is what runs on a GPU: the
padding of sentences and source positions, the copies in and out, the shape keys.
tests/models/test_gpu_cuda.py checks the real capture on a GPU."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.data.vocab import EOS
from ctxnmt.decoding import graphs
from ctxnmt.decoding.graphs import GraphedSearch
from ctxnmt.decoding.length import LengthControl
from ctxnmt.models.nmt import build_model
from tests.decoding.search import search_batch

SRC = [[5, 6, 7, 8, 9], [10, 11], [4, 12, 13, 5, 6, 7, 8], [9, 9, 9], [7, 8, 9, 10, 11, 12], [13, 4]]


def stand_in_capture(run, pool=None):
    outputs = run()

    def replay():
        for into, value in zip(outputs, run()):
            into.copy_(value)
    return replay, outputs, pool


def model_of(seed=0, eos_bias=0.0, **cfg):
    torch.manual_seed(seed)
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8, init="pytorch", **cfg), 16, 16)
    with torch.no_grad():
        model.generator.bias[EOS] += eos_bias  # outputs of varied lengths: sentences leave at different steps
    return model.eval()


def same_hypotheses(a, b):
    assert [[h.tokens for h in hyps] for hyps in a] == [[h.tokens for h in hyps] for hyps in b]
    for hyps_a, hyps_b in zip(a, b):
        for x, y in zip(hyps_a, hyps_b):
            assert x.score == pytest.approx(y.score, abs=1e-5)


@pytest.mark.parametrize("beam", [1, 5])
@pytest.mark.parametrize("model_cfg", [{}, {"cell": "adaptive-gru", "output": "adaptive"}, {"target_context": "self-attentive"}])
@pytest.mark.parametrize("round_sents", [8, 2])
def test_graphed_search_finds_what_eager_search_finds(beam, model_cfg, round_sents, monkeypatch):
    """Padded to 16 positions and to 8 sentences (one shape: as sentences leave, smaller
    encoder sides are copied into the same graph) or to 2 (sentences leaving make new
    shapes), search finds the same hypotheses with the same scores and attention."""
    monkeypatch.setattr(graphs, "ROUND_SENTS", round_sents)
    model = model_of(1, **model_cfg)
    src, mask = pad(SRC)
    length = LengthControl(kind="wu", alpha=0.6, beta=0.2, max_len_b=10)
    eager = search_batch(model, src, mask, beam=beam, nbest=beam, length=length, return_attention=True)
    wrapped = GraphedSearch(model, capture=stand_in_capture)
    found = search_batch(wrapped, src, mask, beam=beam, nbest=beam, length=length, return_attention=True)
    same_hypotheses(eager, found)
    for hyps_a, hyps_b in zip(eager, found):
        for x, y in zip(hyps_a, hyps_b):
            assert torch.allclose(x.attention, y.attention, atol=1e-6)
    assert wrapped.on and (wrapped.captured == 1 if round_sents == 8 else wrapped.captured >= 2)


def test_a_shape_is_captured_once_and_replayed_with_other_sentences():
    model = model_of(2)
    wrapped = GraphedSearch(model, capture=stand_in_capture)
    src, mask = pad(SRC[:4])
    first = search_batch(wrapped, src, mask, beam=3)
    captured = wrapped.captured
    other = [[s[-1]] + s[:-1] for s in SRC[:4]]  # other words, the same lengths: the same shapes
    src2, mask2 = pad(other)
    assert [[h.tokens for h in hyps] for hyps in search_batch(wrapped, src2, mask2, beam=3)] == \
        [[h.tokens for h in hyps] for hyps in search_batch(model, src2, mask2, beam=3)]
    assert first and wrapped.captured == captured


def test_padding_positions_are_zeros_and_padding_rows_repeat_the_first():
    state = graphs.State().rows(h=torch.arange(6.0).view(3, 2)).positions(mask=torch.ones(3, 2)).shared(
        w=torch.ones(4))
    padded = graphs._padded(state, 8, 16)
    assert padded["h"].shape == (8, 2) and torch.equal(padded["h"][3:], state["h"][:1].expand(5, 2))
    assert padded["mask"].shape == (8, 16) and padded["mask"][:, 2:].abs().sum() == 0
    assert torch.equal(padded["w"], state["w"])
    graphs._load(padded, graphs.State().rows(h=torch.zeros(2, 2)).positions(mask=torch.ones(2, 1)).shared(
        w=torch.zeros(4)))
    assert padded["h"][:2].abs().sum() == 0 and torch.equal(padded["h"][2], state["h"][2])  # stale rows stay
    assert padded["mask"][:, 1:].abs().sum() == 0 and padded["mask"][:2, 0].sum() == 2


def test_changed_weights_drop_the_graphs():
    model = model_of(3)
    wrapped = GraphedSearch(model, capture=stand_in_capture)
    src, mask = pad(SRC[:3])
    search_batch(wrapped, src, mask, beam=2)
    assert wrapped.graphs
    with torch.no_grad():
        model.generator.bias.add_(0.5)
    found = search_batch(wrapped, src, mask, beam=2)
    assert [[h.tokens for h in hyps] for hyps in found] == \
        [[h.tokens for h in hyps] for hyps in search_batch(model, src, mask, beam=2)]


def test_a_state_that_grows_with_t_searches_eagerly():
    """The memory-RNN decoder keeps every state so far: a graph per step would cost more than it saves."""
    model = model_of(4, decoder="memory-rnn")
    wrapped = GraphedSearch(model, capture=stand_in_capture)
    src, mask = pad(SRC[:3])
    same_hypotheses(search_batch(model, src, mask, beam=2, nbest=2), search_batch(wrapped, src, mask, beam=2, nbest=2))
    assert not wrapped.on


def test_a_failed_capture_warns_and_searches_eagerly(capsys):
    def failing(run, pool=None):
        raise RuntimeError("operation not permitted when stream is capturing")
    model = model_of(5)
    wrapped = GraphedSearch(model, capture=failing)
    src, mask = pad(SRC[:3])
    same_hypotheses(search_batch(model, src, mask, beam=2, nbest=2), search_batch(wrapped, src, mask, beam=2, nbest=2))
    assert not wrapped.on and "capturing the search step failed" in capsys.readouterr().err


def test_state_pad_is_trims_inverse_and_map_keeps_declarations():
    """State.pad (which the graphs' padding uses) pads source positions with zeros, parts too;
    State.map replaces values and keeps each entry's kind."""
    inner = graphs.State().positions(keys=torch.ones(2, 3, 4))
    state = graphs.State().rows(h=torch.ones(2, 5)).positions(mask=torch.ones(2, 3)).with_part("summary", inner)
    padded = state.pad(8)
    assert padded["mask"].shape == (2, 8) and padded["mask"][:, 3:].abs().sum() == 0
    assert padded.part("summary")["keys"].shape == (2, 8, 4) and torch.equal(padded.trim(3)["mask"], state["mask"])
    assert torch.equal(padded["h"], state["h"])
    doubled = state.map(lambda kind, value: 2 * value)
    assert doubled.kind("mask") is graphs.Kind.POSITIONS and torch.equal(doubled.part("summary")["keys"], 2 * inner["keys"])


def test_state_slice_rows_views_a_run_of_rows_of_every_batch_first_entry():
    """State.slice_rows (forcing a prefix over the rows that have begun) keeps rows start … stop − 1
    of rows and positions, parts too, as views; shared entries stay whole."""
    weight = torch.randn(4, 4)
    inner = graphs.State().rows(c=torch.arange(5.0).view(5, 1))
    state = graphs.State().rows(h=torch.arange(10.0).view(5, 2)).positions(mask=torch.ones(5, 3)).shared(
        w=weight).with_part("summary", inner)
    head = state.slice_rows(1, 3)
    assert head["h"].tolist() == [[2.0, 3.0], [4.0, 5.0]] and head["mask"].shape == (2, 3)
    assert head.part("summary")["c"].view(-1).tolist() == [1.0, 2.0] and head["w"] is weight
    assert head["h"].data_ptr() == state["h"][1:].data_ptr()  # a view: nothing copied
    assert torch.equal(state.slice_rows(0, 1).concat(state.slice_rows(1, 5), 3)["h"], state["h"])
