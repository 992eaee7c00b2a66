"""`ctxnmt analyze gates`: gate values against their literal equation, the subword → word
mapping, and the command end to end on a tiny trained model, with its errors."""
from __future__ import annotations

import csv

import torch

from ctxnmt.analysis.gates import encoder_gates, output_weights, word_spans
from tests.models import reference as ref
from tests.models.test_rnnsearch import SRC, small_model
from tests.test_cli import run, small_corpus, write_config


def literal_gate(cell, x, prev):
    """Mean over dimensions of g = σ(W_g x + b_g + U_g h_prev)."""
    H = cell.hidden_size
    return ref.sigmoid(cell.W.weight[3 * H:] @ x + cell.W.bias[3 * H:] + cell.U.weight[3 * H:] @ prev).mean()


def literal_gates(cell, xs, reverse=False):
    """Along the reference states, each step reading h_{i∓1} (h_0 = 0)."""
    states = ref.run_cell(cell, xs, reverse)
    out = []
    for i, x in enumerate(xs):
        j = i + 1 if reverse else i - 1
        out.append(literal_gate(cell, x, states[j] if 0 <= j < len(xs) else torch.zeros(cell.hidden_size)))
    return torch.stack(out)


def test_encoder_gates_match_literal_equation():
    model = small_model(cell="adaptive-gru")
    gates = encoder_gates(model, SRC)
    assert set(gates) == {"forward", "backward"}
    with torch.no_grad():
        for b, ids in enumerate(SRC):
            xs = [model.src_emb.weight[i] for i in ids]
            torch.testing.assert_close(gates["forward"][b], literal_gates(model.encoder.fwd, xs), atol=1e-6, rtol=0)
            torch.testing.assert_close(gates["backward"][b], literal_gates(model.encoder.bwd, xs, reverse=True),
                                       atol=1e-6, rtol=0)


def test_bcae_gates_match_literal_equation():
    """bcae: the future GRU reads left to right; the context-aware lower level reads h^a_{i+1},
    the upper level reads h^c_i as input and h̃_i as state."""
    model = small_model(cell="adaptive-gru", encoder="bcae")
    enc = model.encoder
    gates = encoder_gates(model, SRC)
    assert set(gates) == {"future", "context-lower", "context-upper"}
    with torch.no_grad():
        for b, ids in enumerate(SRC):
            xs = [model.src_emb.weight[i] for i in ids]
            torch.testing.assert_close(gates["future"][b], literal_gates(enc.future, xs), atol=1e-6, rtol=0)
            future = ref.run_cell(enc.future, xs)
            annotations = ref.context_aware_encode(enc, xs, context_reverse=True)
            zero = torch.zeros(enc.hidden_dim)
            for i, x in enumerate(xs):
                prev = annotations[i + 1] if i + 1 < len(xs) else zero
                torch.testing.assert_close(gates["context-lower"][b][i], literal_gate(enc.lower, x, prev),
                                           atol=1e-6, rtol=0)
                tilde = ref.cell_step(enc.lower, x, prev)
                torch.testing.assert_close(gates["context-upper"][b][i], literal_gate(enc.upper, future[i], tilde),
                                           atol=1e-6, rtol=0)


def test_output_weights_are_distributions_per_token():
    model = small_model(output="adaptive")
    outs = [[5, 6], [7], []]
    alphas = output_weights(model, SRC, outs)
    for out, alpha in zip(outs, alphas):
        assert alpha.shape == (len(out) + 1, 3)
        torch.testing.assert_close(alpha.sum(-1), torch.ones(len(out) + 1))


def test_word_spans_join_bpe_pieces():
    assert word_spans(["el", "ga@@", "t@@", "o", "."]) == [("el", 0, 1), ("gato", 1, 4), (".", 4, 5)]
    assert word_spans(["dang@@"]) == [("dang", 0, 1)]


def test_gates_command_end_to_end(tmp_path, capsys):
    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    assert run(["train", cfg, "--quiet", "--set", "training.max_updates=2", "--set", "training.valid_bleu=false",
                "--set", "model.cell=adaptive-gru", "--set", "model.output=adaptive"], capsys)[0] == 0
    src = tmp_path / "in.es"
    src.write_text("el gato 3 .\n\nel gato gato 11 .\n", encoding="utf-8")
    tags = tmp_path / "in.tags"
    tags.write_text("DET NOUN NUM PUNCT\n\nDET NOUN NOUN NUM PUNCT\n", encoding="utf-8")
    out = tmp_path / "gates.csv"
    code, stdout, _ = run(["analyze", "gates", tmp_path / "m", "-i", src, "--tags", tags, "-o", out, "--beam", "2"],
                          capsys)
    assert code == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    by_key = {(r["section"], r["item"]): r for r in rows}
    assert by_key[("source-tag", "NOUN")]["count"] == "3" and by_key[("source-word", "gato")]["count"] == "3"
    assert by_key[("all", "source words")]["count"] == "9"
    for key in ("gate_forward", "gate_backward"):
        assert 0.0 < float(by_key[("source-tag", "NUM")][key]) < 1.0
    eos = by_key[("output-word", "</s>")]
    assert eos["count"] == "2"
    assert abs(sum(float(eos[k]) for k in ("alpha_s", "alpha_y", "alpha_c")) - 1.0) < 1e-5
    assert "source-tag" in stdout and "gate_forward" in stdout and "alpha_c" in stdout

    # one tag too few on line 3: a one-line error naming the file and line
    tags.write_text("DET NOUN NUM PUNCT\n\nDET NOUN NUM PUNCT\n", encoding="utf-8")
    code, _, err = run(["analyze", "gates", tmp_path / "m", "-i", src, "--tags", tags], capsys)
    assert code == 2 and "in.tags:3: 4 tags for 5 tokenised source words" in err
    assert len(err.strip().splitlines()) == 1


def test_gates_command_refuses_a_model_without_gates(tmp_path, capsys):
    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    assert run(["train", cfg, "--quiet", "--set", "training.max_updates=1", "--set", "training.valid_bleu=false"],
               capsys)[0] == 0
    src = tmp_path / "in.es"
    src.write_text("el gato 3 .\n", encoding="utf-8")
    code, _, err = run(["analyze", "gates", tmp_path / "m", "-i", src], capsys)
    assert code == 2 and "no adaptive gates" in err


def test_stacked_gates_name_every_layer():
    model = small_model(cell="adaptive-gru", encoder="stacked-birnn", encoder_layers=2)
    gates = encoder_gates(model, SRC)
    assert set(gates) == {"layer1-forward", "layer1-backward", "layer2-forward", "layer2-backward"}
    with torch.no_grad():
        xs = [model.src_emb.weight[i] for i in SRC[0]]
        torch.testing.assert_close(gates["layer1-forward"][0], literal_gates(model.encoder.layers[0].fwd, xs),
                                   atol=1e-6, rtol=0)
        upper_inputs = ref.birnn_layer(model.encoder.layers[0], xs)
        torch.testing.assert_close(gates["layer2-backward"][0],
                                   literal_gates(model.encoder.layers[1].bwd, upper_inputs, reverse=True),
                                   atol=1e-6, rtol=0)


def test_decoder_gates_match_literal_equation_at_the_first_step():
    """GRU_1 reads y_0 with state s_0; GRU_2 reads c_1 = Σ α_1i h_i with state s'_1 = GRU_1's output."""
    from ctxnmt.analysis.gates import decoder_gates

    model = small_model(cell="adaptive-gru")
    outs = [[5, 6], [7], []]
    gates = decoder_gates(model, SRC, outs)
    assert set(gates) == {"decoder-gru1", "decoder-gru2"}
    dec = model.decoder
    with torch.no_grad():
        for b, (src, out) in enumerate(zip(SRC, outs)):
            assert gates["decoder-gru1"][b].shape == (len(out) + 1,)
            enc = model.encode(torch.tensor([src]), torch.ones(1, len(src)))
            s0 = dec.initial_state(enc)[0]
            _, _, alpha = model.step(enc, model.init_state(enc), None)
            y0 = model.start.reshape(-1)
            torch.testing.assert_close(gates["decoder-gru1"][b][0], literal_gate(dec.gru1, y0, s0), atol=1e-6, rtol=0)
            s1 = ref.cell_step(dec.gru1, y0, s0)
            c1 = alpha[0] @ enc["annotations"][0]
            torch.testing.assert_close(gates["decoder-gru2"][b][0], literal_gate(dec.gru2, c1, s1), atol=1e-6, rtol=0)
    assert decoder_gates(small_model(), SRC, outs) == {}  # plain GRU: no hyper-gates
