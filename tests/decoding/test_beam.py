"""Beam search: scores, ordering, batching and greedy behave as specified."""
from __future__ import annotations

import torch

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.data.vocab import EOS
from ctxnmt.decoding.beam import beam_search
from ctxnmt.models.nmt import build_model

SRC = [[5, 6, 7, 8, 9], [10, 11], [4, 12, 13, 5, 6, 7, 8], [9, 9, 9]]


def random_model(seed=0):
    torch.manual_seed(seed)
    model = build_model(ModelConfig(emb_dim=8, hidden_dim=12, att_dim=8, init="pytorch"), 16, 16)
    with torch.no_grad():  # a strong bias to EOS keeps random outputs short and varied
        model.generator.bias[EOS] += 1.5
    return model.eval()


def sequence_logprob(model, src, tokens):
    src_t, mask = pad([src])
    with torch.no_grad():
        enc = model.encode(src_t, mask)
        state = model.init_state(enc)
        prev, total = None, 0.0
        for tok in tokens + [EOS]:
            logp, state, _ = model.step(enc, state, prev)
            total += float(logp[0, tok])
            prev = torch.tensor([tok])
    return total


def test_hypothesis_scores_are_their_log_probabilities():
    model = random_model()
    src, mask = pad(SRC)
    for sent, hyps in zip(SRC, beam_search(model, src, mask, beam=4, nbest=4, length_penalty=0.0)):
        assert len(hyps) >= 2
        for h in hyps:
            assert abs(h.logprob - sequence_logprob(model, sent, h.tokens)) < 1e-4
        assert [h.score for h in hyps] == sorted([h.score for h in hyps], reverse=True)


def test_greedy_picks_the_argmax_at_every_step():
    model = random_model(1)
    for sent, hyps in zip(SRC, beam_search(model, *pad(SRC), beam=1)):
        src_t, mask = pad([sent])
        with torch.no_grad():
            enc = model.encode(src_t, mask)
            state = model.init_state(enc)
            prev, out = None, []
            for _ in range(hyps[0].tokens.__len__() + 1):
                logp, state, _ = model.step(enc, state, prev)
                tok = int(logp.argmax(-1))
                if tok == EOS:
                    break
                out.append(tok)
                prev = torch.tensor([tok])
        assert hyps[0].tokens == out


def test_batched_search_equals_one_sentence_at_a_time():
    model = random_model(2)
    batched = beam_search(model, *pad(SRC), beam=5, nbest=3)
    for sent, hyps in zip(SRC, batched):
        alone = beam_search(model, *pad([sent]), beam=5, nbest=3)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        for a, b in zip(hyps, alone):
            assert abs(a.score - b.score) < 1e-5


def test_larger_beam_never_finds_a_worse_best_hypothesis_here():
    model = random_model(3)
    small = beam_search(model, *pad(SRC), beam=1, length_penalty=0.0)
    large = beam_search(model, *pad(SRC), beam=8, length_penalty=0.0)
    for a, b in zip(small, large):
        assert b[0].score >= a[0].score - 1e-6


def test_output_length_is_bounded_and_attention_is_returned():
    model = random_model(4)
    with torch.no_grad():
        model.generator.bias[EOS] -= 50.0  # never ends by itself
    hyps = beam_search(model, *pad(SRC), beam=3, max_len_ratio=1.0, max_len_extra=2, return_attention=True)
    for sent, h in zip(SRC, hyps):
        assert len(h[0].tokens) == len(sent) + 2
        assert h[0].attention.shape == (len(sent) + 2, max(len(s) for s in SRC))
        torch.testing.assert_close(h[0].attention.sum(-1), torch.ones(len(sent) + 2))


def test_search_with_the_fused_kernels_equals_plain_pytorch(monkeypatch):
    """16 rows (4 sentences × beam 4) take the fused top-k kernel; plain PyTorch must agree."""
    from ctxnmt.models import kernels

    model = random_model(5)
    fused = beam_search(model, *pad(SRC), beam=4, nbest=4)
    monkeypatch.setitem(kernels._state, "ok", False)
    plain = beam_search(model, *pad(SRC), beam=4, nbest=4)
    for a, b in zip(fused, plain):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        for x, y in zip(a, b):
            assert abs(x.score - y.score) < 1e-5
