"""Beam search: scores, ordering, batching and greedy behave as specified."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.data.vocab import EOS
from ctxnmt.decoding.length import LengthControl
from ctxnmt.models.nmt import build_model
from tests.decoding.search import search_batch

SRC = [[5, 6, 7, 8, 9], [10, 11], [4, 12, 13, 5, 6, 7, 8], [9, 9, 9]]


def random_model(seed=0):
    torch.manual_seed(seed)
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8, init="pytorch"), 16, 16)
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
    for sent, hyps in zip(SRC, search_batch(model, src, mask, beam=4, nbest=4, length=LengthControl(alpha=0.0))):
        assert len(hyps) >= 2
        for h in hyps:
            assert abs(h.logprob - sequence_logprob(model, sent, h.tokens)) < 1e-4
        assert [h.score for h in hyps] == sorted([h.score for h in hyps], reverse=True)


def test_greedy_picks_the_argmax_at_every_step():
    model = random_model(1)
    for sent, hyps in zip(SRC, search_batch(model, *pad(SRC), beam=1)):
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
    batched = search_batch(model, *pad(SRC), beam=5, nbest=3)
    for sent, hyps in zip(SRC, batched):
        alone = search_batch(model, *pad([sent]), beam=5, nbest=3)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        for a, b in zip(hyps, alone):
            assert abs(a.score - b.score) < 1e-5


@pytest.mark.parametrize("beam", [1, 2])
def test_finished_rows_left_in_the_batch_change_no_hypothesis(beam, monkeypatch):
    """Sentences that finish stay in the batch as rows that search nothing until an eighth
    of the rows are such; the others' hypotheses are those of a search alone."""
    import ctxnmt.decoding.beam as search_module

    torch.manual_seed(7)
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8, init="pytorch"), 16, 16)
    with torch.no_grad():
        model.generator.bias[EOS] -= 0.1  # about half end after a word or two, the others at their limits
    model.eval()
    sources = [torch.randint(4, 16, (int(n),)).tolist() for n in torch.randint(1, 10, (64,))]
    parts, advance = [], search_module._Search.advance
    monkeypatch.setattr(search_module._Search, "advance",
                        lambda self, part: parts.append(advance(self, part)) or parts[-1])
    batched = search_batch(model, *pad(sources), beam=beam, nbest=beam)
    assert any(p is not None and None in p.active for p in parts)  # finished rows did stay
    for sent, hyps in zip(sources, batched):
        alone = search_batch(model, *pad([sent]), beam=beam, nbest=beam)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        for a, b in zip(hyps, alone):
            assert abs(a.score - b.score) < 1e-5


@pytest.mark.parametrize("beam, sentences", [(5, 40), (1, 40), (3, 40)])
def test_finished_sentences_leave_once_they_hold_an_eighth_of_the_rows(beam, sentences, monkeypatch):
    """The lazy-drop threshold counts rows, K per sentence: finished rows stay while fewer
    than an eighth of the rows are finished, whatever the beam size."""
    import ctxnmt.decoding.beam as search_module

    torch.manual_seed(9)
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8, init="pytorch"), 16, 16)
    with torch.no_grad():
        model.generator.bias[EOS] -= 0.1
    model.eval()
    sources = [torch.randint(4, 16, (int(n),)).tolist() for n in torch.randint(1, 10, (sentences,))]
    parts, advance = [], search_module._Search.advance
    monkeypatch.setattr(search_module._Search, "advance",
                        lambda self, part: parts.append(advance(self, part)) or parts[-1])
    # (lengths normalised by |y|, at most 10 more words than the source: rows finish at many steps)
    search_batch(model, *pad(sources), beam=beam, length=LengthControl("power", 1.0, max_len_b=10))
    parts = [p for p in parts if p is not None]
    assert any(None in p.active for p in parts)  # finished rows did stay
    assert all(8 * p.active.count(None) < len(p.active) for p in parts)  # but never an eighth of them
    assert any(len(b.active) < len(a.active) for a, b in zip(parts, parts[1:]))  # and then left


def test_larger_beam_never_finds_a_worse_best_hypothesis_here():
    model = random_model(3)
    small = search_batch(model, *pad(SRC), beam=1, length=LengthControl(alpha=0.0))
    large = search_batch(model, *pad(SRC), beam=8, length=LengthControl(alpha=0.0))
    for a, b in zip(small, large):
        assert b[0].score >= a[0].score - 1e-6


def test_output_length_is_bounded_and_attention_is_returned():
    model = random_model(4)
    with torch.no_grad():
        model.generator.bias[EOS] -= 50.0  # never ends by itself
    hyps = search_batch(model, *pad(SRC), beam=3, length=LengthControl(max_len_a=1.0, max_len_b=2),
                       return_attention=True)
    for sent, h in zip(SRC, hyps):
        assert len(h[0].tokens) == len(sent) + 2
        assert h[0].attention.shape == (len(sent) + 2, len(sent))  # its own source, not the batch's padding
        torch.testing.assert_close(h[0].attention.sum(-1), torch.ones(len(sent) + 2))


def test_search_with_the_fused_kernels_equals_plain_pytorch(monkeypatch):
    """16 rows (4 sentences × beam 4) take the fused top-k kernel; plain PyTorch must agree."""
    from ctxnmt.models import kernels

    model = random_model(5)
    fused = search_batch(model, *pad(SRC), beam=4, nbest=4)
    monkeypatch.setitem(kernels._state, "ok", False)
    plain = search_batch(model, *pad(SRC), beam=4, nbest=4)
    for a, b in zip(fused, plain):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        for x, y in zip(a, b):
            assert abs(x.score - y.score) < 1e-5


def _search_in_batches(model, sources, batch_size, beam, refill_below):
    from ctxnmt.decoding.beam import search_batches

    batches = []
    for start in range(0, len(sources), batch_size):
        index = list(range(start, min(start + batch_size, len(sources))))
        batches.append((index, *pad([sources[i] for i in index]), None))
    return search_batches(model, batches, beam, nbest=2, refill_below=refill_below)


@pytest.mark.parametrize("target_context, beam", [("previous", 1), ("previous", 3), ("mean", 2),
                                                  ("self-attentive-dot", 2)])
def test_later_batches_joining_the_tail_change_no_hypothesis(target_context, beam, monkeypatch):
    """With refill, a batch joins the tail of the one before after its first step (wider
    source padding, rows at different steps); every sentence's hypotheses stay the same.
    self-attentive-dot keeps its previous words in the state: its batches cannot join and
    run one after the other."""
    torch.manual_seed(6)
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8, init="pytorch",
                                    target_context=target_context), 16, 16)
    with torch.no_grad():
        model.generator.bias[EOS] += 0.3  # some end at once, others run to their length limits
    model.eval()
    lengths = [9, 8, 8, 7, 3, 3, 2, 2, 2, 1, 1]  # batches of 4 get shorter, as search_ids sorts them
    sources = [torch.randint(4, 16, (n,)).tolist() for n in lengths]
    alone = _search_in_batches(model, sources, 4, beam, refill_below=0)
    from ctxnmt.decoding import beam as search_module

    joins, join = [], search_module._join
    monkeypatch.setattr(search_module, "_join", lambda a, b: joins.append(join(a, b)) or joins[-1])
    joined = _search_in_batches(model, sources, 4, beam, refill_below=3)
    assert joins and all((j is None) == (target_context == "self-attentive-dot") for j in joins)
    assert alone.keys() == joined.keys() == set(range(len(sources)))
    for i in alone:
        assert [h.tokens for h in joined[i]] == [h.tokens for h in alone[i]]
        for a, b in zip(joined[i], alone[i]):
            assert abs(a.score - b.score) < 1e-5 and abs(a.logprob - b.logprob) < 1e-5


def test_joining_parts_pads_the_encoder_side_and_left_pads_the_words():
    from ctxnmt.decoding.beam import _join, _Search

    model = random_model(7)
    with torch.no_grad():
        model.generator.bias[EOS] = -1e4  # nobody finishes here
        search = _Search(model, 1, LengthControl(), False)
        long = search.advance(search.advance(search.start([0, 1], *pad([[5, 6, 7, 8, 9], [10, 11, 12, 13]]))))
        short = search.advance(search.start([2], *pad([[4, 5]])))
        both = _join(long, short)
    assert both.width == 5 and both.enc["src_mask"].tolist()[2] == [1, 1, 0, 0, 0]
    assert both.enc["annotations"].shape[:2] == (3, 5) and float(both.enc["annotations"][2, 2:].abs().sum()) == 0.0
    assert both.steps == [2, 2, 1] and both.history.shape == (3, 2) and int(both.history[2, 0]) == 0
    assert both.history[2, 1] == short.history[0, 0]


class _LongSourcesEndFirst(torch.nn.Module):
    """A model whose sentences with sources of `long` or more words end at their first
    step (EOS gets log-probability 0): the longest sources leave the search first."""

    def __init__(self, model, long):
        super().__init__()
        self.model, self.long = model, long
        self.vocab_size = model.vocab_size

    def encode(self, src, src_mask, context=None, beam=1, signals=False):
        return self.model.encode(src, src_mask, context, beam, signals)

    def recorded(self, state):
        return self.model.recorded(state)

    def signals(self, enc, record, rows, beam):
        return self.model.signals(enc, record, rows, beam)

    def init_state(self, enc, beam=1):
        return self.model.init_state(enc, beam)

    def memory_lengths(self, enc):
        return self.model.memory_lengths(enc)

    def step_candidates(self, enc, state, prev, k):
        logp, state, alpha = self.model.step(enc, state, prev)
        lengths = enc["src_mask"].sum(1).repeat_interleave(logp.size(0) // enc["src_mask"].size(0))
        logp[lengths >= self.long, EOS] = 0.0
        return *logp.topk(k, dim=-1), state, alpha


@pytest.mark.parametrize("beam", [1, 3])
def test_attention_is_returned_when_the_longest_sources_finish_first(beam):
    """One long source and eight one-word sources (the input of issue 20): when the long one
    ends, search trims the encoder side's padding, and the attention history with it."""
    model = random_model(8)
    with torch.no_grad():
        model.generator.bias[EOS] -= 3.0  # the short ones run on after the long one has ended
    sources = [[5, 6, 7, 8] * 7 + [9, 10]] + [[11]] * 8
    hyps = search_batch(_LongSourcesEndFirst(model, 30), *pad(sources), beam=beam, return_attention=True)
    assert hyps[0][0].tokens == [] and hyps[0][0].attention.shape == (1, 30)
    for sent in hyps[1:]:
        att = sent[0].attention
        assert len(sent[0].tokens) > 0 and att.size(0) - len(sent[0].tokens) in (0, 1)  # 0: cut at max_len
        torch.testing.assert_close(att.sum(-1), torch.ones(att.size(0)))
        # The trimmed columns were padding: all the weight is on the one real source word.
        torch.testing.assert_close(att[:, 0], torch.ones(att.size(0)))
    plain = search_batch(model, *pad(sources[1:]), beam=beam)
    assert [h[0].tokens for h in hyps[1:]] == [h[0].tokens for h in plain]


@pytest.mark.parametrize("beam", [1, 3])
def test_a_search_step_writes_nothing_into_the_encoder_side(beam):
    """The encoder side is what `encode` declared for the beam; steps only read it."""
    from ctxnmt.decoding.beam import _Search

    model = random_model(9)
    with torch.no_grad():
        model.generator.bias[EOS] = -1e4  # nobody finishes, nobody leaves
        search = _Search(model, beam, LengthControl(), False)
        part = search.start([0, 1, 2], *pad(SRC[:3]))
        before = {name: (part.enc.kind(name), part.enc[name].clone()) for name in part.enc}
        for _ in range(3):
            part = search.advance(part)
            assert set(part.enc) == set(before)
            for name, (kind, value) in before.items():
                assert part.enc.kind(name) is kind and torch.equal(part.enc[name], value)


class OnDevice(torch.Tensor):
    """A tensor standing for one on a GPU: every value read on the host (`.cpu()`, `.tolist()`,
    `int(t)`, …) is counted, since on a GPU each waits for the device."""
    reads = 0
    READS = {torch.Tensor.cpu, torch.Tensor.tolist, torch.Tensor.item, torch.Tensor.__int__, torch.Tensor.__float__,
             torch.Tensor.__bool__, torch.Tensor.__index__, torch.Tensor.numpy}

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in cls.READS:
            cls.reads += 1
            if func is torch.Tensor.cpu:  # on the host: a plain tensor from here on
                with torch._C.DisableTorchFunctionSubclass():
                    return args[0].as_subclass(torch.Tensor).clone()
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("length, cut_off", [(LengthControl(kind="wu", alpha=0.6, beta=0.2), False),
                                             (LengthControl(kind="power", alpha=1.0, max_len_a=0.5, max_len_b=2), True)])
def test_bookkeeping_read_in_place_on_the_host_finds_what_the_packed_copy_finds(length, cut_off, monkeypatch):
    """On the CPU a step's bookkeeping reads its tensors in place (ON_HOST); the one packed
    transfer a device needs must find the same hypotheses, cut-offs at the length limit included."""
    from ctxnmt.decoding import beam as search_module

    model, (src, mask) = random_model(4), pad(SRC)
    if cut_off:
        with torch.no_grad():
            model.generator.bias[EOS] = -1e4  # nobody ends by </s>: every hypothesis is cut off at the limit
    in_place = search_batch(model, src, mask, beam=5, nbest=5, length=length)
    monkeypatch.setattr(search_module, "ON_HOST", ())
    packed = search_batch(model, src, mask, beam=5, nbest=5, length=length)
    assert [[(h.tokens, h.score, h.logprob) for h in hyps] for hyps in in_place] == \
        [[(h.tokens, h.score, h.logprob) for h in hyps] for hyps in packed]
    assert all(len(h.tokens) == length.max_len(len(s)) for hyps, s in zip(in_place, SRC) for h in hyps) == cut_off


@pytest.mark.parametrize("beam", [1, 5])
def test_a_search_step_reads_the_device_once_and_once_more_when_hypotheses_end(beam, monkeypatch):
    """One read of the device per step for the bookkeeping, and one more for the words of the
    hypotheses that end there (not one per hypothesis, nor per value read)."""
    from ctxnmt.decoding import beam as search_module
    from ctxnmt.decoding.beam import _Search

    made = []  # every hypothesis that ends, counted as it is made (the kept lists are capped at K)
    hypothesis = search_module.Hypothesis
    monkeypatch.setattr(search_module, "Hypothesis", lambda *a, **k: made.append(1) or hypothesis(*a, **k))
    monkeypatch.setattr(search_module, "ON_HOST", ())  # OnDevice's device type is still "cpu"
    model = random_model(3)
    src, mask = pad(SRC)
    search = _Search(model, beam, LengthControl(kind="wu", alpha=0.6, beta=0.2), False)
    with torch.no_grad():
        part = search.start(list(range(len(SRC))), src.as_subclass(OnDevice), mask.as_subclass(OnDevice))
        steps = ends = 0
        while part is not None:
            OnDevice.reads, finished = 0, len(made)
            part = search.advance(part)
            steps += 1
            ended = len(made) - finished
            ends += ended > 0
            assert 1 <= OnDevice.reads <= 1 + (ended > 0), (steps, ended, OnDevice.reads)
    assert ends > 0 and all(len(s.finished) >= beam for s in search.sentences.values())
