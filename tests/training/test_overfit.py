"""A small model must be able to learn a handful of pairs by heart: the loss goes to
nearly zero and both greedy and beam search reproduce every target exactly."""
from __future__ import annotations

import torch

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.data.vocab import EOS
from ctxnmt.models.nmt import build_model
from tests.decoding.search import search_batch


def synthetic_pairs(n=20, vocab=30, seed=0):
    """Targets are a deterministic function of the source (reversed, shifted ids),
    with lengths that differ between source and target."""
    gen = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        length = int(torch.randint(3, 9, (1,), generator=gen))
        src = torch.randint(4, vocab, (length,), generator=gen).tolist()
        tgt = [4 + (x * 7) % (vocab - 4) for x in reversed(src)][: max(2, length - 1)]
        pairs.append((src, tgt + [EOS]))
    return pairs


def test_small_model_overfits_twenty_pairs():
    torch.manual_seed(0)
    pairs = synthetic_pairs()
    cfg = ModelConfig.of(emb_dim=32, hidden_dim=64, att_dim=32, dropout_out=0.0, init="pytorch")
    model = build_model(cfg, 30, 30)
    src, src_mask = pad([s for s, _ in pairs])
    tgt, tgt_mask = pad([t for _, t in pairs])
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(600):
        opt.zero_grad()
        nll, n = model.loss(src, src_mask, tgt, tgt_mask)
        (nll / len(pairs)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if float(nll.detach()) / n < 0.003:
            break
    model.eval()
    with torch.no_grad():
        nll, n = model.loss(src, src_mask, tgt, tgt_mask)
    assert float(nll) / n < 0.01  # nats per target token
    for beam in (1, 5):
        hyps = search_batch(model, src, src_mask, beam=beam)
        assert [h[0].tokens for h in hyps] == [t[:-1] for _, t in pairs], f"beam {beam}"
