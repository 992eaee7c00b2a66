"""A new variant is one class and one registry entry, outside the package: this file
registers a toy d_t summary, a toy cGRU decoder and a toy decoder of its own with a
setting of its own, as docs/new-variant.md shows, and they train, decode incrementally
as they do under teacher forcing, join refilled batches or not as their state allows,
and translate through the command line; the decoder of its own is also served and
analysed as far as its capabilities go."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from ctxnmt.config import ModelConfig
from ctxnmt.data.batching import pad
from ctxnmt.data.vocab import EOS
from ctxnmt.decoding.beam import search_batches
from ctxnmt.errors import ConfigError
from ctxnmt.models.decoders import ConditionalGRUDecoder
from ctxnmt.models.interfaces import Decoder
from ctxnmt.models.nmt import build_model
from ctxnmt.models.output import readout_dim
from ctxnmt.models.registry import DECODERS, TARGET_CONTEXTS
from ctxnmt.models.state import State
from ctxnmt.models.target_context import TargetContext
from tests.decoding.search import search_batch
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


@dataclass(frozen=True)
class SharpnessSettings:
    toy_sharpness: float = 1.0  # κ, how sharply the toy decoder attends


@DECODERS.register("toy-dot-gru", settings=SharpnessSettings)
class DotAttentionGRUDecoder(Decoder):
    """Not a cGRU: s_t = GRU(E y_{t-1}, s_{t-1}) with s_0 = tanh(W_0 mean_i h_i),
    α_t = softmax_i(κ · s_tᵀ W_k h_i), c_t = Σ_i α_ti h_i and t_t = tanh(W_o [s_t; c_t; E y_{t-1}]).
    κ is its own setting, model.toy_sharpness.  No target-context summary, no hyper-gates."""

    def __init__(self, emb_dim: int, hidden_dim: int, ctx_dim: int, out_dim: int, sharpness: float):
        super().__init__()
        self.out_dim, self.sharpness = out_dim, sharpness
        self.init = nn.Linear(ctx_dim, hidden_dim)
        self.cell = nn.GRUCell(emb_dim, hidden_dim)
        self.keys = nn.Linear(ctx_dim, hidden_dim, bias=False)
        self.readout = nn.Linear(hidden_dim + ctx_dim + emb_dim, out_dim)

    @classmethod
    def from_config(cls, cfg, ctx_dim):
        settings = cfg.settings(SharpnessSettings)
        return cls(cfg.emb_dim, cfg.hidden_dim, ctx_dim, readout_dim(cfg), settings.toy_sharpness)

    def prepare(self, annotations, src_mask, doc=None, beam=1):
        return State().positions(annotations=annotations, src_mask=src_mask, keys=self.keys(annotations))

    def init_state(self, enc, beam=1):
        mask = enc["src_mask"].unsqueeze(-1)
        mean = (enc["annotations"] * mask).sum(1) / mask.sum(1)
        return State().rows(s=torch.tanh(self.init(mean)).repeat_interleave(beam, dim=0))

    def step(self, enc, state, prev_emb_t, word_input_t):
        s = self.cell(word_input_t, state["s"])
        keys, annotations = enc["keys"], enc["annotations"]
        N, S, H = keys.shape  # R = N·K rows read N sentences
        e = self.sharpness * torch.bmm(s.view(N, -1, H), keys.transpose(1, 2))
        alpha = torch.softmax(e.masked_fill(enc["src_mask"].unsqueeze(1) == 0, float("-inf")), dim=-1)
        c = torch.bmm(alpha, annotations).view(-1, annotations.size(-1))
        return torch.tanh(self.readout(torch.cat([s, c, prev_emb_t], -1))), State().rows(s=s), alpha.view(-1, S)

    def forward(self, enc, prev_emb, tgt_mask):
        state, readouts, alphas = self.init_state(enc), [], []
        for emb_t in prev_emb.unbind(1):
            readout, state, alpha = self.step(enc, state, emb_t, self.word_input(emb_t))
            readouts.append(readout)
            alphas.append(alpha)
        return torch.stack(readouts, 1), torch.stack(alphas, 1)


VARIANTS = [{"target_context": "toy-last-two"}, {"decoder": "toy-running-max"},
            {"decoder": "toy-running-max", "target_context": "toy-last-two"},
            {"decoder": "toy-dot-gru", "toy_sharpness": 2.0}]


def toy_model(seed=0, **switches):
    torch.manual_seed(seed)
    model = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8, init="pytorch", dropout_out=0.0,
                                       **switches), 16, 16)
    with torch.no_grad():
        model.generator.bias[EOS] += 1.0
    return model


@pytest.mark.parametrize("switches", VARIANTS, ids=lambda v: "+".join(map(str, v.values())))
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
        hyps = search_batch(model, src, src_mask, beam=beam)
        assert [h[0].tokens for h in hyps] == [[6, 7, 8], [9], [10, 11, 12, 13], [6, 6]]


@pytest.mark.parametrize("switches", VARIANTS, ids=lambda v: "+".join(map(str, v.values())))
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


# -- a decoder of its own, with a setting of its own ---------------------------------------------

def test_a_variants_own_setting_is_a_model_key_of_its_type():
    assert toy_model(decoder="toy-dot-gru", toy_sharpness=2.0).decoder.sharpness == 2.0
    assert toy_model(decoder="toy-dot-gru").decoder.sharpness == 1.0  # its default
    with pytest.raises(ConfigError, match="toy_sharpnes'.*did you mean 'model.toy_sharpness'"):
        ModelConfig.of(toy_sharpnes=2.0)
    from ctxnmt.config import from_dict

    assert from_dict({"model": {"toy_sharpness": "3"}}).model.settings(SharpnessSettings).toy_sharpness == 3.0
    with pytest.raises(ConfigError, match="model.toy_sharpness' must be of type float"):
        from_dict({"model": {"toy_sharpness": "sharp"}})


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory):
    """The decoder of its own, trained through the command line with its setting."""
    from ctxnmt.cli import main
    from tests.test_cli import small_corpus, write_config

    tmp = tmp_path_factory.mktemp("toy-dot-gru")
    data = small_corpus(tmp)
    cfg = write_config(tmp / "c.yaml", data, tmp / "m")
    assert main(["train", str(cfg), "--quiet", "--set", "training.max_updates=3", "--set", "training.threads=1",
                 "--set", "model.decoder=toy-dot-gru", "--set", "model.toy_sharpness=0.5"]) == 0
    return tmp / "m"


def test_a_decoder_of_its_own_trains_and_translates_with_its_setting(toy_dir):
    from ctxnmt.decoding.translator import Translator

    assert "toy_sharpness: 0.5" in (toy_dir / "config.yaml").read_text()  # flat among the model keys
    translator = Translator.load(toy_dir)
    assert isinstance(translator.model.decoder, DotAttentionGRUDecoder) and translator.model.decoder.sharpness == 0.5
    out = translator.translate(["el gato 3 .", "", "el gato 5 ."], beam=2, return_attention=True)
    assert out[1].text == "" and out[0].attention.shape == (len(out[0].tokens) + 1, len(out[0].src_tokens))


def test_a_decoder_without_a_summary_is_served_with_its_capabilities(toy_dir):
    from fastapi.testclient import TestClient

    from ctxnmt.decoding.translator import Translator
    from ctxnmt.serve.app import ServeSettings, create_app

    translator = Translator.load(toy_dir)
    with TestClient(create_app(translator, [str(toy_dir)], ServeSettings(beam=2))) as client:  # starts up
        info = client.get("/v1/models").json()
        answer = client.post("/v1/translate", json={"text": ["el gato 3 ."], "attention": True}).json()
    assert info["signals"] == {"target_attention": False, "encoder_gates": False, "output_gates": False,
                               "document_context": False}
    assert info["models"][0]["capabilities"] == {"encoder_hyper_gates": [], "decoder_hyper_gates": [],
                                                 "target_attention": False, "adaptive_output": False,
                                                 "document_context": False}
    assert info["models"][0]["architecture"]["toy_sharpness"] == 0.5
    sentence = answer["sentences"][0]
    assert sentence["attention"] and sentence["target_attention"] is None and sentence["gates"] is None


def test_a_decoder_of_its_own_is_analysed_as_far_as_its_capabilities_go(toy_dir):
    from ctxnmt.analysis.alignment import forced_word_alignments
    from ctxnmt.analysis.gates import analyse_lines
    from ctxnmt.analysis.target_attention import load_analysed
    from ctxnmt.decoding.translator import Translator

    translator = Translator.load(toy_dir)
    (src_words, tgt_words, matrix), = forced_word_alignments(translator, ["el gato 3 ."], ["the cat 3 ."])
    # source attention: every decoder has it
    assert len(matrix) == len(tgt_words) and {len(row) for row in matrix} == {len(src_words)}
    with pytest.raises(ConfigError, match="no adaptive gates"):
        analyse_lines(translator, ["el gato 3 ."])
    with pytest.raises(ConfigError, match="toy-dot-gru decoder .* has no attention over previous words"):
        load_analysed(str(toy_dir), None)
