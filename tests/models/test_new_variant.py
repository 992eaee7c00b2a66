"""A new variant is one class and one registry entry, outside the package: this file
registers a toy d_t summary and a toy decoder, as docs/new-variant.md shows, and they
train, decode incrementally as they do under teacher forcing, join refilled batches or
not as their state allows, and translate through the command line."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.data.vocab import EOS
from ctxnmt.decoding.beam import beam_search, search_batches
from ctxnmt.models.decoders import ConditionalGRUDecoder
from ctxnmt.models.nmt import build_model
from ctxnmt.models.registry import DECODERS, TARGET_CONTEXTS
from ctxnmt.models.state import State
from ctxnmt.models.target_context import TargetContext
from tests.decoding.test_beam import SRC


@TARGET_CONTEXTS.register("toy-last-two")
class LastTwoWords(TargetContext):
    """d_t = σ(w) ⊙ E y_{t-1} + (1 − σ(w)) ⊙ E y_{t-2}, with E y_{-1} = 0."""

    def __init__(self, emb_dim: int, **_):
        super().__init__(emb_dim)
        self.w = nn.Parameter(torch.zeros(emb_dim))

    def full(self, prev_emb, mask, states=None, contexts=None):
        before = torch.cat([torch.zeros_like(prev_emb[:, :1]), prev_emb[:, :-1]], dim=1)
        g = torch.sigmoid(self.w)
        return g * prev_emb + (1 - g) * before

    def init_state(self, rows, like):
        return State().rows(toy_before=like.new_zeros(rows, self.out_dim))

    def step(self, state, prev_emb, s=None, c=None):
        g = torch.sigmoid(self.w)
        return g * prev_emb + (1 - g) * state["toy_before"], State().rows(toy_before=prev_emb)


@DECODERS.register("toy-running-max")
class RunningMaxDecoder(ConditionalGRUDecoder):
    """The cGRU whose deep output also reads m_t = max(m_{t-1}, s_t) (element-wise, m_0 = s_0)
    through W_m: an extra per-row state entry, and nothing search needs to be told."""

    def __init__(self, emb_dim, hidden_dim, att_dim, ctx_dim, out_dim, **kwargs):
        super().__init__(emb_dim, hidden_dim, att_dim, ctx_dim, out_dim, **kwargs)
        self.from_max = nn.Linear(hidden_dim, out_dim, bias=False)

    def output_extra(self, S):
        return self.from_max(torch.cummax(S, dim=1).values)

    def init_state(self, enc, beam=1):
        state = super().init_state(enc, beam)
        return state.rows(toy_max=torch.full_like(state["s"], float("-inf")))

    def output_extra_step(self, state, s, new):
        m = torch.maximum(state["toy_max"], s)
        new.rows(toy_max=m)
        return self.from_max(m)


VARIANTS = [{"target_context": "toy-last-two"}, {"decoder": "toy-running-max"},
            {"decoder": "toy-running-max", "target_context": "toy-last-two"}]


def toy_model(seed=0, **switches):
    torch.manual_seed(seed)
    model = build_model(ModelConfig(emb_dim=8, hidden_dim=12, att_dim=8, init="pytorch", dropout_out=0.0,
                                    **switches), 16, 16)
    with torch.no_grad():
        model.generator.bias[EOS] += 1.0
    return model


@pytest.mark.parametrize("switches", VARIANTS, ids=lambda v: "+".join(v.values()))
def test_a_registered_variant_learns_and_decodes_as_it_trains(switches):
    model = toy_model(**switches)
    src, src_mask = pad(SRC)
    tgt, tgt_mask = pad([[6, 7, 8, EOS], [9, EOS], [10, 11, 12, 13, EOS], [6, 6, EOS]])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        nll, tokens = model.loss(src, src_mask, tgt, tgt_mask)
        (nll / tokens).backward()
        optimizer.step()
        losses.append(float(nll.detach() / tokens))
    assert losses[-1] < 0.5 * losses[0]
    model.eval()
    with torch.no_grad():  # one step at a time gives teacher forcing's log-probabilities
        readout, _ = model(src, src_mask, tgt, tgt_mask)
        full = torch.log_softmax(model.logits(readout), -1)
        enc = model.encode(src, src_mask)
        state, prev = model.init_state(enc), None
        for t in range(tgt.size(1)):
            logp, state, _ = model.step(enc, state, prev)
            torch.testing.assert_close(logp, full[:, t], atol=1e-5, rtol=0)
            prev = tgt[:, t]
    # it has learnt the training pairs: greedy and beam search give them back
    for beam in (1, 3):
        hyps = beam_search(model, src, src_mask, beam=beam)
        assert [h[0].tokens for h in hyps] == [[6, 7, 8], [9], [10, 11, 12, 13], [6, 6]]


@pytest.mark.parametrize("switches", VARIANTS, ids=lambda v: "+".join(v.values()))
def test_a_registered_variant_searches_refilled_batches_as_batch_by_batch(switches):
    model = toy_model(3, **switches).eval()
    sources = [torch.randint(4, 16, (n,)).tolist() for n in [7, 6, 6, 5, 3, 2, 2, 1]]
    batches = [([i for i in range(s, s + 3) if i < len(sources)], *pad(sources[s: s + 3]), None)
               for s in range(0, len(sources), 3)]
    alone = search_batches(model, batches, beam=1)
    refilled = search_batches(model, batches, beam=1, refill_below=2)
    assert [alone[i][0].tokens for i in alone] == [refilled[i][0].tokens for i in alone]


def test_a_registered_variant_trains_and_translates_through_the_command_line(tmp_path, capsys):
    from tests.test_cli import run, small_corpus, write_config

    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    code, _, err = run(["train", cfg, "--quiet", "--set", "training.max_updates=2", "--set",
                        "model.decoder=toy-running-max", "--set", "model.target_context=toy-last-two"], capsys)
    assert code == 0, err
    src = tmp_path / "in.es"
    src.write_text("el gato 3 .\n\nel gato 5 .\n")
    code, out, err = run(["translate", tmp_path / "m", "-i", src, "--beam", "2"], capsys)
    assert code == 0 and len(out.split("\n")) == 4 and out.split("\n")[1] == "", err
