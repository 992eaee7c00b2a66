"""A target context of one's own, with a setting of its own, is one class and its registry
line (docs/new-variant.md), and trains in both tasks: the translation decoder's d_t and
the language model's summary, each reading the setting from its own config.

The toy is an exponentially decaying memory of the words so far, written here from its
equation:  d_t = λ d_{t-1} + (1 − λ) E y_{t-1},  d_0 = 0,  λ = model.toy_decay."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import yaml

from ctxnmt.config import ModelConfig
from ctxnmt.data.vocab import EOS
from ctxnmt.errors import ConfigError
from ctxnmt.lm.config import LMModelConfig, load_lm_config
from ctxnmt.lm.model import ResidualLM
from ctxnmt.models.nmt import build_model
from ctxnmt.models.registry import TARGET_CONTEXTS
from ctxnmt.models.state import State
from ctxnmt.models.target_context import TargetContext
from tests.lm.test_lm import STREAM, tiny_corpus  # noqa: F401  (a fixture)
from tests.lm.test_lm import run, write_config as write_lm_config
from tests.test_cli import small_corpus, write_config


@dataclass(frozen=True)
class DecaySettings:
    toy_decay: float = 0.5  # λ


@TARGET_CONTEXTS.register("toy-decayed", settings=DecaySettings)
class DecayedWords(TargetContext):
    def __init__(self, emb_dim: int, decay: float):
        super().__init__(emb_dim)
        self.decay = decay

    @classmethod
    def from_config(cls, cfg, hidden_dim=0, ctx_dim=0):
        return cls(cfg.emb_dim, cfg.settings(DecaySettings).toy_decay)

    def full(self, prev_emb, mask, states=None, contexts=None):
        d, out = torch.zeros_like(prev_emb[:, 0]), []
        for t in range(prev_emb.size(1)):
            d = self.decay * d + (1 - self.decay) * prev_emb[:, t]
            out.append(d)
        return torch.stack(out, 1)

    def init_state(self, rows, like):
        return State().rows(toy_decayed=like.new_zeros(rows, self.out_dim))

    def step(self, state, prev_emb, s=None, c=None):
        d = self.decay * state["toy_decayed"] + (1 - self.decay) * prev_emb
        return d, State().rows(toy_decayed=d)


def literal(emb: torch.Tensor, tokens: list[int], decay: float) -> torch.Tensor:
    """The equation along a language model's text: d restarts (d = 0) before each start symbol."""
    d, out = torch.zeros(emb.size(-1)), []
    for t, token in enumerate(tokens):
        if token == EOS:
            d = torch.zeros_like(d)
        d = decay * d + (1 - decay) * emb[t]
        out.append(d)
    return torch.stack(out)


def test_the_setting_is_read_from_a_translation_config_and_from_a_language_model_config():
    nmt = build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8, target_context="toy-decayed",
                                     toy_decay=0.25), 16, 16)
    assert nmt.decoder.summary.decay == 0.25
    assert build_model(ModelConfig.of(emb_dim=8, hidden_dim=12, att_dim=8, target_context="toy-decayed"),
                       16, 16).decoder.summary.decay == 0.5  # its default
    lm = ResidualLM(LMModelConfig.of(summary="toy-decayed", toy_decay=0.75, emb_dim=8, hidden_dim=10), 14)
    assert lm.summary.decay == 0.75
    assert ModelConfig.of(target_context="toy-decayed", toy_decay=0.25).to_dict()["toy_decay"] == 0.25
    assert "toy_decay" not in ModelConfig.of().to_dict()  # a setting of a component the config does not use
    try:
        LMModelConfig.of(toy_decai=0.2)
    except ConfigError as err:
        assert "did you mean 'model.toy_decay'" in str(err)
    else:
        raise AssertionError("a misspelt setting was accepted")


def test_in_a_language_model_it_restarts_at_each_sentence_and_carries_across_segments():
    torch.manual_seed(0)
    lm = ResidualLM(LMModelConfig.of(summary="toy-decayed", toy_decay=0.25, emb_dim=8, hidden_dim=10), 14)
    tokens = torch.tensor([STREAM])
    emb = lm.embedding(tokens)
    whole, _ = lm.summary.stream(emb, tokens == EOS)
    torch.testing.assert_close(whole[0], literal(emb[0], STREAM, 0.25), atol=1e-6, rtol=0)
    first, state = lm.summary.stream(emb[:, :11], tokens[:, :11] == EOS)  # cut inside a sentence
    second, _ = lm.summary.stream(emb[:, 11:], tokens[:, 11:] == EOS, state)
    torch.testing.assert_close(torch.cat([first, second], 1), whole, atol=1e-6, rtol=0)


def test_it_trains_through_both_commands_with_its_setting(tiny_corpus, tmp_path, capsys):  # noqa: F811
    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "nmt")
    code, _, err = run(["train", cfg, "--quiet", "--set", "training.max_updates=2", "--set",
                        "model.target_context=toy-decayed", "--set", "model.toy_decay=0.25"], capsys)
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "nmt" / "config.yaml").read_text())["model"]["toy_decay"] == 0.25
    src = tmp_path / "in.es"
    src.write_text("el gato 3 .\n")
    code, out, err = run(["translate", tmp_path / "nmt", "-i", src, "--beam", "2"], capsys)
    assert code == 0 and len(out.splitlines()) == 1, err

    lm_dir = tmp_path / "lm"
    lm_dir.mkdir()
    lm_cfg = write_lm_config(lm_dir, tiny_corpus, "toy-decayed")
    code, out, err = run(["lm", "train", lm_cfg, "--quiet", "--set", "training.max_updates=100",
                          "--set", "model.toy_decay=0.25"], capsys)
    assert code == 0, err
    saved = load_lm_config(lm_dir / "model" / "config.yaml")
    assert saved.model.summary == "toy-decayed" and saved.model.to_dict()["toy_decay"] == 0.25
    # it learnt the three repeated sentences: far below the uniform perplexity of its vocabulary
    test_ppl = float(out.rsplit("test ppl ", 1)[1])
    assert test_ppl < 3.0, out
