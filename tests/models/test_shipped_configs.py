"""Every shipped config builds its model, and that model takes one training step and one
beam-search step on a tiny batch (an LM config: one training step), so a config naming a
broken combination fails here, not 20 minutes into a run.  Sizes shrink (keeping which
of them agree or differ) so that the 40 configs take seconds, not minutes."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from ctxnmt.config import ModelConfig, load_config
from ctxnmt.data.batching import pad, pad_context
from ctxnmt.decoding.beam import _Search
from ctxnmt.data.words import WordBoundaries
from ctxnmt.decoding.length import length_control
from ctxnmt.models.context import context_sentences
from ctxnmt.training.optim import build_optimizer

CONFIGS = sorted([*(Path(__file__).parent.parent.parent / "configs").glob("*.yaml"),
                  *(Path(__file__).parent.parent.parent / "configs" / "variants").glob("*.yaml")])
SRC, TGT = [[5, 6, 7, 8], [9, 10]], [[11, 12, 13, 2], [14, 2]]
VOCAB = 20


def _shrunk(m):
    """The model config with small sizes; equal sizes stay equal, different ones different."""
    keys = m.to_dict()
    out_dim = 0 if keys["out_dim"] == 0 else 8 if keys["out_dim"] == m.emb_dim else 9
    doc_dim = 0 if keys["doc_dim"] == 0 else 12 if keys["doc_dim"] == m.hidden_dim else 7
    att_dim = 12 if m.att_dim == m.hidden_dim else 10
    return ModelConfig.of(**{**keys, "emb_dim": 8, "hidden_dim": 12, "att_dim": att_dim, "out_dim": out_dim,
                             "doc_dim": doc_dim})


def _one_update(model, loss, optimizer_cfg) -> None:
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer([p for p in model.parameters() if p.requires_grad], optimizer_cfg)
    assert torch.isfinite(loss)
    loss.backward()
    optimizer.step()
    after = [p for p in model.parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(after, before))  # the step changed the weights


@pytest.mark.parametrize("path", [p for p in CONFIGS if not p.name.startswith("lm-")], ids=lambda p: p.name)
def test_a_shipped_configs_model_trains_one_step_and_searches_one_step(path):
    from ctxnmt.models.nmt import build_model

    torch.manual_seed(0)
    config = load_config(path)
    model = build_model(_shrunk(config.model), VOCAB, VOCAB)
    k = context_sentences(config.model)
    context = pad_context([[[5, 6]], [[7], [8, 9]]], k) if k else None
    src, src_mask = pad(SRC)
    tgt, tgt_mask = pad(TGT)
    model.train()
    nll, tokens = model.loss(src, src_mask, tgt, tgt_mask, config.training.label_smoothing, context)
    assert tokens == 6
    _one_update(model, nll / len(SRC), config.training)
    model.eval()
    with torch.no_grad():
        words = WordBoundaries(torch.zeros(VOCAB, dtype=torch.bool), torch.zeros(VOCAB, dtype=torch.bool))
        search = _Search(model, config.decoding.beam, length_control(config.decoding, None, words=words), True)
        part = search.advance(search.start([0, 1], src, src_mask, context))
    assert part is not None and part.history.shape == (len(SRC) * config.decoding.beam, 1)
    assert torch.isfinite(part.scores[:, 0]).all()


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.name.startswith("lm-")], ids=lambda p: p.name)
def test_a_shipped_language_model_config_trains_one_step(path):
    from ctxnmt.lm.config import load_lm_config
    from ctxnmt.lm.model import ResidualLM

    torch.manual_seed(0)
    config = load_lm_config(path)
    model = ResidualLM(dataclasses.replace(config.model, emb_dim=8, hidden_dim=12), VOCAB).train()
    tokens = torch.tensor([[5, 6, 2, 7], [8, 2, 9, 10]])
    targets = torch.tensor([[6, 2, 7, 11], [2, 9, 10, 12]])
    nll, _ = model.loss(tokens, targets, model.initial_state(2))
    _one_update(model, nll, config.training)
