"""The RNNsearch baseline against the literal reference, and incremental decoding
against teacher forcing."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.data.vocab import EOS
from ctxnmt.models.cells import GRUCell, scan
from ctxnmt.models.nmt import build_model
from tests.models import reference as ref

SRC = [[5, 6, 7, 8, 9], [10, 11], [4, 12, 13, 5, 6, 7, 8]]
TGT = [[5, 9, 7, EOS], [8, 6, 5, 4, 11, 12, EOS], [13, EOS]]


def small_model(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig.of(emb_dim=8, hidden_dim=10, att_dim=9, dropout_out=0.0, init="pytorch", **overrides)
    model = build_model(cfg, 16, 16)
    with torch.no_grad():  # a non-zero start vector makes the y_0 path visible to the check
        model.start.normal_()
    return model.eval()


def batch_logprobs(model, src_ids, tgt_ids):
    src, src_mask = pad(src_ids)
    tgt, tgt_mask = pad(tgt_ids)
    readout, alpha = model(src, src_mask, tgt, tgt_mask)
    return torch.log_softmax(model.logits(readout), -1), alpha


def test_gru_cell_matches_reference():
    torch.manual_seed(1)
    cell = GRUCell(6, 5)
    x, h = torch.randn(6), torch.randn(5)
    fast = cell.step(cell.input_proj(x.unsqueeze(0)), h.unsqueeze(0))[0]
    torch.testing.assert_close(fast, ref.gru_step(cell, x, h), atol=1e-6, rtol=0)


def test_scan_holds_state_on_padding():
    torch.manual_seed(2)
    cell = GRUCell(4, 3)
    x = torch.randn(1, 5, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0]])
    states = scan(cell, cell.input_proj(x), torch.zeros(1, 3), mask)
    torch.testing.assert_close(states[0, 3], states[0, 2])
    torch.testing.assert_close(states[0, 4], states[0, 2])


def test_encoder_matches_reference_in_padded_batch():
    model = small_model()
    src, mask = pad(SRC)
    annotations = model.encoder(model.src_emb(src), mask)
    for b, ids in enumerate(SRC):
        torch.testing.assert_close(annotations[b, : len(ids)], ref.birnn_encode(model, ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("learned_start, decoder", [(False, "cgru"), (True, "cgru"), (False, "self-attentive-rnn"),
                                                          (True, "memory-rnn")])
def test_teacher_forced_logprobs_match_reference(learned_start, decoder):
    model = small_model(learned_start=learned_start, decoder=decoder)
    logp, alpha = batch_logprobs(model, SRC, TGT)
    for b, (s, t) in enumerate(zip(SRC, TGT)):
        ref_logp, ref_alpha = ref.rnnsearch_logprobs(model, s, t)
        torch.testing.assert_close(logp[b, : len(t)], ref_logp, atol=1e-5, rtol=0)
        torch.testing.assert_close(alpha[b, : len(t), : len(s)], ref_alpha, atol=1e-5, rtol=0)
        assert float(alpha[b, :, len(s):].detach().abs().sum()) == 0.0  # padding gets no attention


def test_zero_start_embedding_is_default():
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=10, att_dim=9), 16, 16)
    assert not model.start.requires_grad and float(model.start.abs().sum()) == 0.0


def test_loss_is_summed_negative_log_likelihood():
    model = small_model()
    src, src_mask = pad(SRC)
    tgt, tgt_mask = pad(TGT)
    with torch.no_grad():
        nll, n = model.loss(src, src_mask, tgt, tgt_mask)
        expected = -sum(float(ref.rnnsearch_logprobs(model, s, t)[0].gather(1, torch.tensor(t).unsqueeze(1)).sum())
                        for s, t in zip(SRC, TGT))
    assert n == sum(len(t) for t in TGT)
    assert float(nll) == pytest.approx(expected, abs=1e-4)


def test_papers_initialisation():
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=10, att_dim=9, init="normal"), 16, 16)
    U = model.encoder.fwd.U.weight.detach()
    for block in U.chunk(3, dim=0):
        torch.testing.assert_close(block @ block.t(), torch.eye(10), atol=1e-5, rtol=0)
    W = model.encoder.fwd.W.weight.detach()
    assert 0.005 < float(W.std()) < 0.015
    assert float(model.encoder.fwd.W.bias.detach().abs().sum()) == 0.0


def test_tied_output_embeddings_share_storage():
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=10, att_dim=9, tie_embeddings=True), 16, 16)
    assert model.generator.weight.data_ptr() == model.tgt_emb.weight.data_ptr()


def assert_steps_match_teacher_forcing(model, logp_full, context=None):
    """Incremental decoding (init_state / step, as beam search runs it) gives the teacher-forced
    log-probabilities (B, T, V) of SRC → TGT at every real target position, with one row
    per sentence (greedy: GRU_2's input from c_t) and with two (beams: from per-sentence values)."""
    src, src_mask = pad(SRC)
    tgt, _ = pad(TGT)
    for beam in (1, 2):
        with torch.no_grad():
            enc = model.encode(src, src_mask, context)
            state, prev = model.init_state(enc, beam), None
            for t in range(tgt.size(1)):
                logp, state, _ = model.step(enc, state, prev)
                for b, ids in enumerate(TGT):
                    if t < len(ids):
                        for row in range(b * beam, (b + 1) * beam):
                            torch.testing.assert_close(logp[row], logp_full[b, t], atol=1e-5, rtol=0)
                prev = tgt[:, t].repeat_interleave(beam)


@pytest.mark.parametrize("rows", [3, 40, 300])
def test_decoding_log_probs_equal_the_softmax_layer_in_either_layout(rows):
    """log_probs takes the product as (W_o tᵀ)ᵀ below 256 rows; it must not change the numbers."""
    model = small_model()
    readout = torch.randn(rows, model.cfg.emb_dim)
    expected = torch.log_softmax(model.logits(readout), -1)
    with torch.no_grad():
        fast = model.log_probs(readout)
    assert fast.shape == (rows, 16) and fast.is_contiguous()
    torch.testing.assert_close(fast, expected, rtol=1e-5, atol=1e-6)


def test_searchs_word_input_table_follows_every_weight_change():
    """Search looks GRU_1's input term W E_y + b up in a per-word table; the table is formed
    again after the weights change in place (optimiser steps, checkpoint loads)."""
    model = small_model()
    src, src_mask = pad(SRC)
    prev = torch.tensor([5, 9, 13])

    def second_step():
        enc = model.encode(src, src_mask)
        _, state, _ = model.step(enc, model.init_state(enc), None)
        return model.step(enc, state, prev)[0]

    def without_table():  # autograd on: the per-step product, never the table
        with torch.enable_grad():
            return second_step().detach()

    with torch.no_grad():
        first = second_step()
        table = model._word_inputs.table
        assert table.shape == (16, 30)
        torch.testing.assert_close(first, without_table(), rtol=0, atol=1e-6)
        model.decoder.gru1.W.bias.add_(0.5)
        model.tgt_emb.weight.mul_(1.5)
        changed = second_step()
        assert model._word_inputs.table is not table
        torch.testing.assert_close(changed, without_table(), rtol=0, atol=1e-6)
        assert (changed - first).abs().max() > 1e-3
        model.load_state_dict(small_model().state_dict())
        torch.testing.assert_close(second_step(), first, rtol=0, atol=1e-6)
