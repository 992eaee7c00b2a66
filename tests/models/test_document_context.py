"""Cross-sentence context (Wang et al.): the hierarchical summary D and each way of
integrating it, against literal per-step references; incremental decoding against
teacher forcing; the empty context; the gates."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import Context, pad, pad_context
from ctxnmt.data.vocab import PAD
from ctxnmt.errors import ConfigError
from ctxnmt.models.nmt import build_model, count_parameters
from tests.models import reference_document as ref
from tests.models.test_rnnsearch import SRC, TGT, assert_steps_match_teacher_forcing

# previous sentences of each SRC sentence, oldest first: none, one, three
CONTEXT = [[], [[4, 5, 6]], [[7, 8], [9, 10, 11, 12, 13, 14], [5]]]

INTEGRATIONS = {
    "init-enc": dict(doc_init_enc=True),
    "init-dec": dict(doc_init_dec=True),
    "aux": dict(doc_aux="aux"),
    "gated-aux": dict(doc_aux="gated-aux"),  # with our b_z (the dataclass default)
    "gated-aux-eq5": dict(doc_aux="gated-aux", doc_gate_bias=False),  # the paper's configs
    "gated-aux-code": dict(doc_aux="gated-aux-code"),
    "init-both-gated-aux": dict(doc_init_enc=True, doc_init_dec=True, doc_aux="gated-aux"),
    "init-enc-projected": dict(doc_init_enc=True, doc_dim=7),  # D of another size than the encoder's state
    "separate-embeddings": dict(doc_init_dec=True, doc_aux="aux", doc_embeddings="separate"),
}


def doc_model(decoder: str = "cgru", **switches) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig.of(emb_dim=8, hidden_dim=10, att_dim=9, dropout_out=0.0, init="pytorch", decoder=decoder,
                      **switches)
    model = build_model(cfg, 16, 16)
    with torch.no_grad():
        model.start.normal_()
    return model.eval()


def forward_logprobs(model, src_ids=SRC, tgt_ids=TGT, context=CONTEXT):
    src, src_mask = pad(src_ids)
    tgt, tgt_mask = pad(tgt_ids)
    ctx = pad_context(context, 3) if context is not None else None
    readout, _ = model(src, src_mask, tgt, tgt_mask, ctx)
    return torch.log_softmax(model.logits(readout), -1)


@pytest.mark.parametrize("embeddings", ["shared", "separate"])
def test_hierarchical_summary_matches_literal_reference(embeddings):
    model = doc_model(doc_aux="aux", doc_embeddings=embeddings, doc_dim=6)
    ctx = pad_context(CONTEXT, 3)  # different numbers of sentences and lengths: padding in both RNNs
    D = model.document(ctx.ids, ctx.mask, model.src_emb)
    for b, sentences in enumerate(CONTEXT):
        torch.testing.assert_close(D[b], ref.hierarchical_summary(model, sentences), atol=1e-6, rtol=0)
    alone = model.document(*(lambda c: (c.ids, c.mask))(pad_context([CONTEXT[2]], 3)), model.src_emb)
    torch.testing.assert_close(alone[0], D[2], atol=1e-6, rtol=0)


def test_first_sentence_has_zero_summary():
    model = doc_model(doc_aux="aux")
    ctx = pad_context([[], []], 3)
    assert float(model.document(ctx.ids, ctx.mask, model.src_emb).detach().abs().max()) == 0.0


@pytest.mark.parametrize("embeddings", ["shared", "separate"])
def test_with_null_sentence_a_first_sentence_reads_the_released_codes_null_history(embeddings):
    """The released code (tuzhaopeng/LC-NMT) gives a document's first sentence the history
    "NULL", a word outside its vocabulary: D is the summary of the one-word sentence [UNK],
    with context blocks and without any context alike; sentences with history are unchanged."""
    from ctxnmt.data.vocab import UNK

    model = doc_model(doc_aux="aux", doc_embeddings=embeddings, doc_dim=6, doc_start="null-sentence")
    ctx = pad_context(CONTEXT, 3)  # CONTEXT[0] is a first sentence
    D = model.document(ctx.ids, ctx.mask, model.src_emb)
    null = ref.hierarchical_summary(model, [[UNK]])
    assert float(null.detach().abs().max()) > 0
    torch.testing.assert_close(D[0], null, atol=1e-6, rtol=0)
    for b in (1, 2):
        torch.testing.assert_close(D[b], ref.hierarchical_summary(model, CONTEXT[b]), atol=1e-6, rtol=0)
    src, mask = pad(SRC)
    without = model.document.empty(len(SRC), model.src_emb(src), model.src_emb)
    torch.testing.assert_close(without, null.expand(len(SRC), -1), atol=1e-6, rtol=0)
    assert ctx.ids[0].eq(PAD).all()  # the caller's block is left as it was


@pytest.mark.parametrize("name", list(INTEGRATIONS))
def test_teacher_forcing_matches_literal_reference(name):
    model = doc_model(**INTEGRATIONS[name])
    logp = forward_logprobs(model)
    for b, (s, t) in enumerate(zip(SRC, TGT)):
        torch.testing.assert_close(logp[b, : len(t)], ref.document_logprobs(model, s, t, CONTEXT[b]),
                                   atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["init-enc", "init-dec", "aux", "gated-aux", "init-both-gated-aux",
                                  "init-enc-projected"])
def test_without_previous_sentences_the_model_is_the_sentence_model(name):
    """D = 0 for a document's first sentence (and without document ids): every integration but
    the released gate then computes the sentence-level model with the same shared weights."""
    model = doc_model(**INTEGRATIONS[name])
    baseline = doc_model()
    baseline.load_state_dict(model.state_dict(), strict=False)
    expected = forward_logprobs(baseline, context=None)
    torch.testing.assert_close(forward_logprobs(model, context=None), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(forward_logprobs(model, context=[[], [], []]), expected, atol=1e-6, rtol=0)


def test_context_changes_the_prediction():
    model = doc_model(**INTEGRATIONS["init-both-gated-aux"])
    with_ctx, without = forward_logprobs(model), forward_logprobs(model, context=None)
    assert float((with_ctx[1] - without[1]).detach().abs().max()) > 1e-3
    torch.testing.assert_close(with_ctx[0], without[0], atol=1e-6, rtol=0)  # sentence 0 has no context


@pytest.mark.parametrize("decoder", ["cgru", "self-attentive-rnn", "memory-rnn"])
@pytest.mark.parametrize("name", list(INTEGRATIONS))
def test_incremental_decoding_matches_teacher_forcing(name, decoder):
    model = doc_model(decoder, **INTEGRATIONS[name])
    logp_full = forward_logprobs(model)
    assert_steps_match_teacher_forcing(model, logp_full, pad_context(CONTEXT, 3))


@pytest.mark.parametrize("name", ["aux", "gated-aux", "gated-aux-code"])
def test_beam_rows_share_their_sentence_summary(name):
    """With K hypotheses per sentence, every row continues with its own sentence's D, and
    reordered rows continue as the rows they were copied from."""

    model = doc_model(**INTEGRATIONS[name])
    src, src_mask = pad(SRC)
    tgt, _ = pad(TGT)
    K = 2
    with torch.no_grad():
        enc = model.encode(src, src_mask, pad_context(CONTEXT, 3))
        single = model.init_state(enc)
        state = model.init_state(enc, beam=K)
        logp1, single, _ = model.step(enc, single, None)
        logpK, state, _ = model.step(enc, state, None)
        torch.testing.assert_close(logpK, logp1.repeat_interleave(K, 0), atol=1e-6, rtol=0)
        perm = torch.tensor([1, 0, 2, 3, 5, 4])  # rows stay within their sentence
        prev = tgt[:, 0].repeat_interleave(K)
        ref_logp, _, _ = model.step(enc, state, prev)
        logp_perm, _, _ = model.step(enc, state.select(perm), prev[perm])
    torch.testing.assert_close(logp_perm, ref_logp[perm], atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["gated-aux", "gated-aux-eq5", "gated-aux-code"])
def test_gates_lie_in_the_open_unit_interval_and_match_the_reference(name, monkeypatch):
    model = doc_model(**INTEGRATIONS[name])
    seen = []
    gate = model.decoder.document.gate
    monkeypatch.setattr(model.decoder.document, "gate", lambda *a: seen.append(gate(*a)) or seen[-1])
    forward_logprobs(model, SRC[2:], TGT[2:], CONTEXT[2:])
    literal = []
    ref.document_logprobs(model, SRC[2], TGT[2], CONTEXT[2], gates=literal)
    assert len(seen) == len(TGT[2]) == len(literal)
    for fast, slow in zip(seen, literal):
        assert bool(((fast > 0) & (fast < 1)).all())
        torch.testing.assert_close(fast[0], slow, atol=1e-6, rtol=0)


@pytest.mark.parametrize("gate_bias", [False, True])
def test_gated_aux_with_the_gate_forced_open_equals_aux(gate_bias, monkeypatch):
    """Eq. 6 with z_t = 1 is eq. 4's aux."""
    gated = doc_model(doc_aux="gated-aux", doc_gate_bias=gate_bias)
    assert (gated.decoder.document.gate_word.bias is not None) == gate_bias  # eq. 5 has no b_z; ours adds it
    monkeypatch.setattr(gated.decoder.document, "gate",
                        lambda enc, s_prev, alpha, y_term: torch.ones(s_prev.size(0), enc["doc"].size(-1)))
    aux = doc_model(doc_aux="aux")
    missing, unexpected = aux.load_state_dict(gated.state_dict(), strict=False)
    assert not missing and all(".gate_" in k for k in unexpected)
    torch.testing.assert_close(forward_logprobs(gated), forward_logprobs(aux), atol=1e-6, rtol=0)


def test_parameters_added_by_each_part():
    e, h, c, d = 8, 10, 20, 6  # embeddings, decoder state, annotations, D
    base = count_parameters(doc_model())

    def growth(**switches):
        return count_parameters(doc_model(doc_dim=d, **switches)) - base

    # sentence GRU (e → d) and document GRU (d → d): W, b, U each
    rnns = (3 * d * e + 3 * d + 3 * d * d) + (3 * d * d + 3 * d + 3 * d * d)
    assert growth(doc_init_enc=True) == rnns + d * h  # + the projection of D to the encoder's size
    assert growth(doc_init_dec=True) == rnns + h * d
    assert growth(doc_aux="aux") == rnns + 3 * h * d
    assert growth(doc_aux="gated-aux", doc_gate_bias=False) == rnns + 3 * h * d + h * d + e * d + c * d  # eq. 5
    assert growth(doc_aux="gated-aux") == rnns + 3 * h * d + h * d + e * d + d + c * d  # + our b_z
    assert growth(doc_aux="aux", doc_embeddings="separate") == rnns + 3 * h * d + 16 * e


def test_unknown_integration_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown doc_aux 'gated'.*gated-aux"):
        doc_model(doc_aux="gated")


def test_context_block_is_oldest_first_with_empty_slots_last():
    ctx = pad_context([[], [[4, 5]], [[6], [7, 8, 9]]], 3)
    assert isinstance(ctx, Context) and ctx.ids.shape == (3, 3, 3)
    assert ctx.ids[2, 0].tolist() == [6, 0, 0] and ctx.ids[2, 1].tolist() == [7, 8, 9]
    assert float(ctx.mask[0].sum()) == 0.0 and float(ctx.mask[1, 1:].sum()) == 0.0


def test_a_sentence_level_model_has_no_document_parameters():
    """Old checkpoints keep loading: the document parts exist only when a switch is on."""
    assert not [k for k in doc_model().state_dict() if "document" in k]


@pytest.mark.parametrize("encoder", ["birnn", "stacked-birnn", "fcae", "bcae"])
@pytest.mark.parametrize("cell", ["gru", "adaptive-gru"])
def test_every_encoder_starts_from_the_document_state(encoder, cell):
    """init-enc with any encoder: each recurrence starts from h0, alone or in a padded batch."""
    from tests.models.reference import encode

    model = doc_model(encoder=encoder, cell=cell, doc_init_enc=True)
    src, src_mask = pad(SRC)
    h0 = torch.randn(len(SRC), model.encoder.state_dim)
    with torch.no_grad():
        annotations = model.encoder(model.src_emb(src), src_mask, h0)
        for b, ids in enumerate(SRC):
            expected = encode(model, ids, h0[b])
            torch.testing.assert_close(annotations[b, : len(ids)], expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("decoder", ["cgru", "memory-rnn"])
@pytest.mark.parametrize("name", list(INTEGRATIONS))
def test_encoder_side_entries_with_a_source_axis_are_the_declared_ones(name, decoder):
    """Search pads and trims exactly the entries declared POSITIONS along the source axis when
    batches join (decoding.beam); any other entry with that axis would be cut wrongly."""
    from ctxnmt.models.state import Kind

    model = doc_model(decoder, **INTEGRATIONS[name])
    src, src_mask = (torch.nn.functional.pad(x, (0, 4)) for x in pad(SRC))  # 11 positions: no size of doc_model
    with torch.no_grad():
        enc = model.encode(src, src_mask, pad_context(CONTEXT, 3), beam=2)  # beams share per-annotation values
    with_axis = {k for k, v in enc.items() if enc.kind(k) is not Kind.SHARED and v.dim() >= 2
                 and v.size(1) == src.size(1)}
    declared = {k for k in enc if enc.kind(k) is Kind.POSITIONS}
    assert with_axis == declared and {"annotations", "src_mask", "keys", "values"} <= with_axis


# -- with the hyper-gated cell (adaptive-gru), whose GRU_2 has four pre-activation blocks ----------

@pytest.mark.parametrize("cell", ["adaptive-gru", "adaptive-gru-released"])
@pytest.mark.parametrize("name", ["aux", "gated-aux", "gated-aux-code", "init-both-gated-aux"])
def test_with_a_hyper_gated_cell_incremental_decoding_matches_teacher_forcing(name, cell):
    model = doc_model(cell=cell, **INTEGRATIONS[name])
    assert_steps_match_teacher_forcing(model, forward_logprobs(model), pad_context(CONTEXT, 3))


@pytest.mark.parametrize("cell", ["adaptive-gru", "adaptive-gru-released"])
def test_with_a_hyper_gated_cell_D_is_an_input_of_every_block_of_GRU_2(cell):
    """aux is s_t = GRU_2([c_t; D], s'_t) with the hyper-gated cell too: W_D D reaches r, z,
    the candidate and the hyper-gate g = σ(W_g [c_t; D] + U_g s'_t), as c_t does."""
    from ctxnmt.models.state import State
    from tests.models.reference import cell_step

    model = doc_model(cell=cell, doc_aux="aux")
    document, gru2 = model.decoder.document, model.decoder.gru2
    W_D = document.from_document.weight
    c, D, s1 = torch.randn(2, gru2.input_size), torch.randn(2, W_D.size(1)), torch.randn(2, gru2.hidden_size)
    wide = type(gru2)(gru2.input_size + W_D.size(1), gru2.hidden_size)  # GRU_2 reading [c_t; D]
    with torch.no_grad():
        wide.W.weight.copy_(torch.cat([gru2.W.weight, W_D], dim=1))
        wide.W.bias.copy_(gru2.W.bias)
        wide.U.weight.copy_(gru2.U.weight)
        enc = State()
        document.prepare(enc, D, gru2)
        xp2, hp2 = document.gru2_terms(enc, gru2.input_proj(c), s1 @ gru2.hidden_weight(), None, s1, None, None)
        fast = gru2.combine(xp2, hp2, s1)
        for b in range(2):
            torch.testing.assert_close(fast[b], cell_step(wide, torch.cat([c[b], D[b]]), s1[b]), atol=1e-6, rtol=0)
