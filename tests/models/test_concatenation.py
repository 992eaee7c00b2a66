"""Concatenation (Tiedemann & Scherrer 2017): 2-to-1 joins the previous source sentences and a
break before the sentence; 2-to-2 also forces the decoder through the previous target
sentences and a break.  Written from the papers' description of the joined input, not from
the code: the joined sequences below are spelled out by hand."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.config import Config, ModelConfig, TrainingConfig, validate
from ctxnmt.data.batching import pad, pad_context
from ctxnmt.data.vocab import EOS, PAD
from ctxnmt.decoding.ensemble import Ensemble
from ctxnmt.decoding.forced import _step_through, forced_log_probs
from ctxnmt.errors import ConfigError
from ctxnmt.models.context import Concatenation, context_sentences, reads_target_context
from ctxnmt.models.nmt import build_model
from ctxnmt.models.state import State
from tests.decoding.search import search_batch

V = 30
BRK = V  # the break: one past the vocabulary
SRC = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
TGT = [[5, 6, EOS], [7, EOS], [9, 10, 11, EOS]]
CONTEXT = [[[4, 5], [6]], [], [[7, 8, 9]]]  # sentence 1 has two previous sentences, sentence 2 none
TARGET_CONTEXT = [[[12, 13, EOS], [14, EOS]], [], [[15, 16, 17, EOS]]]


def model(**switches):
    torch.manual_seed(0)
    cfg = ModelConfig.of(emb_dim=16, hidden_dim=24, att_dim=20, context="concat", concat_sents=2, **switches)
    return build_model(cfg, V, V).eval()


def batch():
    src, src_mask = pad(SRC)
    tgt, tgt_mask = pad(TGT)
    return src, src_mask, tgt, tgt_mask, pad_context(CONTEXT, 2, targets=TARGET_CONTEXT)


def test_the_source_is_the_previous_sentences_each_followed_by_a_break_then_the_sentence():
    src, src_mask, _, _, ctx = batch()
    ids, mask, before = Concatenation.join(ctx.ids, ctx.mask, src, src_mask, BRK)
    rows = [ids[b, : int(mask[b].sum())].tolist() for b in range(3)]
    assert rows == [[4, 5, BRK, 6, BRK, 5, 6, 7], [8, 9], [7, 8, 9, BRK, 10, 11, 12, 13]]
    assert before.tolist() == [5, 0, 4]


def test_a_target_sentence_ends_in_the_break_instead_of_its_end_of_sentence():
    ctx = batch()[4]
    empty = torch.zeros(3, 0, dtype=torch.long)
    ids, mask, before = Concatenation.join(ctx.tgt_ids, ctx.tgt_mask, empty, empty.float(), BRK)
    assert [ids[b, : int(mask[b].sum())].tolist() for b in range(3)] == [[12, 13, BRK, 14, BRK], [],
                                                                        [15, 16, 17, BRK]]


def test_the_memory_holds_the_sentence_first_and_its_context_right_after_it():
    """Row 0: three words after a context of five positions; row 1: two words, no context.
    Each row's own words come first, its context follows at once, padding only at the end."""
    annotations = torch.arange(8.0).view(1, 8, 1).repeat(2, 1, 1)  # position i of the joined sequence holds i
    src_mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    memory, mask, memory_len = Concatenation.current_first(annotations, torch.tensor([5, 0]), src_mask)
    assert memory[0].view(-1).tolist() == [5, 6, 7, 0, 1, 2, 3, 4]
    assert memory[1].view(-1).tolist() == [0, 1, 0, 0, 0, 0, 0, 0]
    assert mask.tolist() == [[1] * 8, [1, 1] + [0] * 6] and memory_len.tolist() == [8, 2]


@pytest.mark.parametrize("target,decoder", [(False, {}), (True, {}), (True, {"target_context": "mean"}),
                                             (True, {"target_context": "self-attentive"})])
def test_incremental_decoding_equals_the_teacher_forced_pass(target, decoder):
    """The 2-to-2 prefix is read word by word without forming readouts (`forced_step`); a
    decoder with a summary of the previous words must still have read the prefix into it, as
    the teacher-forced pass does (decoders whose state grows with t are refused a prefix: below)."""
    m = model(concat_target=target, **decoder)
    src, src_mask, tgt, tgt_mask, ctx = batch()
    readout, attention = m(src, src_mask, tgt, tgt_mask, ctx)
    full = torch.log_softmax(m.logits(readout), -1).gather(2, tgt.unsqueeze(-1)).squeeze(-1)
    stepped = _step_through(m, src, src_mask, ctx, tgt)
    assert torch.allclose(full * tgt_mask, stepped * tgt_mask, atol=1e-5)
    assert attention.shape == (3, tgt.size(1), src.size(1))  # the attention on the sentence itself


def test_a_forced_prefix_steps_only_the_rows_whose_prefix_has_begun_and_reaches_the_same_states():
    """Right-aligned prefixes of 3, 7, 0, 7 and 1 words: the reference steps every row at every
    column and keeps the state of a row whose prefix has not begun; `_forced_steps` steps only
    the begun rows, longest first, and must reach the same state for each row, in its order."""
    m = model(concat_target=True, target_context="mean")
    torch.manual_seed(1)
    srcs = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14], [15, 16]]
    src, src_mask = pad(srcs)
    enc = m.encode(src, src_mask, pad_context([[[4, 5]], [[6]], [], [[7, 8, 9]], [[3]]], 1))
    lens = torch.tensor([3, 7, 0, 7, 1])
    embs, word_inputs = torch.randn(5, 7, 16), torch.randn(5, 7, 3 * 24)
    reference = m.decoder.init_state(enc, 1)
    for t in range(7):
        stepped = m.decoder.forced_step(enc, reference, embs[:, t], word_inputs[:, t])
        begun = (t >= 7 - lens).view(-1, 1)
        reference = State().rows(s=torch.where(begun, stepped["s"], reference["s"])).with_part(
            "summary", State().rows(**{k: torch.where(begun, v, reference.part("summary")[k])
                                       for k, v in stepped.part("summary").items()}))
    state = m._forced_steps(enc, embs, word_inputs, lens)
    assert torch.allclose(state["s"], reference["s"], atol=1e-6)
    for k, v in reference.part("summary").items():
        assert torch.allclose(state.part("summary")[k], v, atol=1e-6)
    # no prefix: never stepped, so its initial state (to the rounding of a product whose rows
    # were reordered, which threaded BLAS may split otherwise; one step moves it far more)
    assert torch.allclose(state["s"][2], m.decoder.init_state(enc, 1)["s"][2], rtol=0, atol=1e-7)


def test_without_context_a_concatenation_model_is_the_sentence_model_with_its_weights():
    m = model(concat_target=True)
    torch.manual_seed(0)
    sentence = build_model(ModelConfig.of(emb_dim=16, hidden_dim=24, att_dim=20), V, V).eval()
    sentence.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("concat.")})
    src, src_mask, tgt, tgt_mask, _ = batch()
    none = pad_context([[], [], []], 2, targets=[[], [], []])
    for context in (None, none):
        a, _ = m(src, src_mask, tgt, tgt_mask, context)
        b, _ = sentence(src, src_mask, tgt, tgt_mask)
        assert torch.allclose(a, b, atol=1e-6)


def test_the_target_prefix_changes_what_the_decoder_predicts_and_the_loss_counts_the_sentence():
    m = model(concat_target=True)
    src, src_mask, tgt, tgt_mask, ctx = batch()
    other = pad_context(CONTEXT, 2, targets=[[[20, EOS], [21, EOS]], [], [[22, EOS]]])
    a, _ = m(src, src_mask, tgt, tgt_mask, ctx)
    b, _ = m(src, src_mask, tgt, tgt_mask, other)
    assert not torch.allclose(a[0], b[0]) and torch.allclose(a[1], b[1])  # sentence 1 has no context
    _, tokens = m.loss(src, src_mask, tgt, tgt_mask, context=ctx)
    assert tokens == int(tgt_mask.sum())
    on_all = model(concat_target=True, concat_loss="all")
    _, all_tokens = on_all.loss(src, src_mask, tgt, tgt_mask, context=ctx)
    assert all_tokens == int(tgt_mask.sum()) + 5 + 4  # the prefixes' words and breaks


def test_beam_search_returns_attention_over_the_sentence_and_ensembles_with_a_sentence_model():
    m = model()
    src, src_mask, _, _, ctx = batch()
    hyps = search_batch(m, src, src_mask, beam=3, context=ctx, return_attention=True)
    for b, found in enumerate(hyps):
        assert found[0].attention.shape[1] == len(SRC[b])
    torch.manual_seed(1)
    sentence = build_model(ModelConfig.of(emb_dim=16, hidden_dim=24, att_dim=20), V, V).eval()
    both = Ensemble([m, sentence])
    assert both.memory_lengths(both.encode(src, src_mask, ctx)) == [3 + 5, 2, 4 + 4]  # own words, then the context
    assert all(search_batch(both, src, src_mask, beam=3, context=ctx))


def test_forced_scores_read_the_target_context_they_are_given():
    m = model(concat_target=True)
    own = forced_log_probs(m, SRC, TGT, CONTEXT, target_context=TARGET_CONTEXT)
    other = forced_log_probs(m, SRC, TGT, CONTEXT, target_context=[[[20, EOS], [21, EOS]], [], [[22, EOS]]])
    assert abs(own[0].sum() - other[0].sum()) > 1e-4 and own[1].sum() == pytest.approx(other[1].sum(), abs=1e-6)


def test_the_data_side_reads_k_and_the_target_flag_from_the_context_input():
    assert context_sentences(ModelConfig.of(context="concat", concat_sents=2)) == 2
    assert not reads_target_context(ModelConfig.of(context="concat"))
    assert reads_target_context(ModelConfig.of(context="concat", concat_target=True))
    assert context_sentences(ModelConfig.of(doc_aux="aux", doc_sents=4)) == 4  # the doc_* keys select it
    assert context_sentences(ModelConfig()) == 0


@pytest.mark.parametrize("keys, message", [
    (dict(context="concat", doc_aux="aux"), "model.context: concat reads no hierarchical summary"),
    (dict(context="concat", concat_sents=0), "model.concat_sents must be"),
    (dict(context="concat", concat_loss="prefix"), "model.concat_loss must be one of current, all"),
    (dict(context="concat", concat_loss="all"), "model.concat_loss: all needs model.concat_target"),
    (dict(context="concat", concat_target=True, decoder="memory-rnn"), "model.concat_target needs"),
    (dict(context="concatenate"), "unknown context 'concatenate'"),
])
def test_a_config_the_concatenation_cannot_run_is_refused_in_one_line(keys, message):
    config = Config(model=ModelConfig.of(**keys))
    with pytest.raises(ConfigError, match=message):
        validate(config)
        build_model(config.model, V, V)


def test_coword_dropout_needs_a_document_model_and_a_probability():
    with pytest.raises(ConfigError, match="training.coword_dropout needs a document-context model"):
        validate(Config(training=TrainingConfig(coword_dropout=0.1)))
    with pytest.raises(ConfigError, match=r"training.coword_dropout must be"):
        validate(Config(model=ModelConfig.of(context="concat"), training=TrainingConfig(coword_dropout=1.0)))
    validate(Config(model=ModelConfig.of(context="concat"), training=TrainingConfig(coword_dropout=0.1)))


def test_coword_dropout_masks_the_current_words_only_at_its_rate_and_the_same_on_resume():
    from ctxnmt.data.vocab import UNK
    from ctxnmt.tasks.translation import coword_dropout

    src = torch.randint(4, V, (200, 30))
    mask = torch.ones(200, 30)
    mask[:, 25:] = 0
    src = src.masked_fill(~mask.bool(), PAD)
    dropped = coword_dropout(src, mask, 0.3, (1, 7, 0))
    changed = dropped != src
    assert torch.equal(changed, (dropped == UNK) & mask.bool())  # only real words, only to <unk>
    assert 0.27 < float(changed.sum()) / float(mask.sum()) < 0.33
    assert torch.equal(dropped, coword_dropout(src, mask, 0.3, (1, 7, 0)))
    assert not torch.equal(dropped, coword_dropout(src, mask, 0.3, (1, 8, 0)))


def test_length_limits_and_the_coverage_penalty_read_the_sentence_not_its_context():
    from ctxnmt.decoding.length import LengthControl

    m = model(concat_target=True)
    src, src_mask, _, _, ctx = batch()
    length = LengthControl(max_len_a=1.0, max_len_b=0, beta=0.2)  # at most |x| words, the context's not counted
    for b, found in enumerate(search_batch(m, src, src_mask, beam=3, context=ctx, length=length)):
        assert all(len(h.tokens) <= len(SRC[b]) for h in found)


def test_documents_advance_together_and_each_sentence_reads_its_own_previous_translation():
    from ctxnmt.config import DecodingConfig
    from ctxnmt.decoding.translator import _waves, search_ids

    assert _waves([0, 1, 2, 3, 4], [[], [[0]], [[0], [1]], [], [[3]]]) == [[0, 3], [1, 4], [2]]
    m = model(concat_target=True)
    src = [[5, 6, 7], [8, 9], [10, 11, 12], [13, 14]]  # documents: 0, 1, 2 and 3
    context = [[], [[5, 6, 7]], [[5, 6, 7], [8, 9]], []]
    target_of = [[], [[0]], [[0], [1]], []]
    found = search_ids(m, src, DecodingConfig(), beam=3, context=context, target_of=target_of)
    for i in (1, 2):
        own = [found[j][0].tokens + [EOS] for group in target_of[i] for j in group]
        s, s_mask = pad([src[i]])
        alone = search_batch(m, s, s_mask, beam=3, context=pad_context([context[i]], 2, targets=[own]))
        assert alone[0][0].tokens == found[i][0].tokens
    other = search_ids(m, src, DecodingConfig(), beam=3, context=context,
                       target_of=[[], [[3]], [[3], [3]], []])  # another document's translation instead
    assert [h[0].score for h in other][1:3] != pytest.approx([h[0].score for h in found][1:3])
