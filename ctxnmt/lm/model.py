"""The residual LSTM language model (Miculicich Werlen et al.'s LM experiments).

  s_t = LSTM(E w_t, s_{t-1})
  d_t = summary of the words of the current sentence read so far, w_r … w_t
  g_t = tanh(W_s s_t + W_d d_t + b)        (the deep output of the decoder, in R^e)
  p(w_{t+1}) = softmax(E g_t + b_o)        (E: the input embeddings, tied, Press & Wolf)

g maps to the embedding size e whatever the LSTM size, so W_s is the projection
that lets the softmax layer share the embedding matrix.  The summary d_t is a target
context of the translation decoder's registry (ctxnmt.models.target_context), built from
this config as the decoder builds it, so one registered there trains here too: `previous`
d_t = E w_t; `mean` the average of E w_{r+1} … E w_t, the words of the sentence without its
start symbol (the paper's eq. 11, which the LM section reuses; d_r = E w_r while no word
follows it, as the decoder's d_1 = y_0); `mean-with-start` (ours) the average of E w_r … E w_t;
`self-attentive` Σ_i α_ti E w_i over the same words w_{r+1} … w_t, α_t = softmax_i(vᵀ tanh(W_y
E w_i + b)) (eqs. 12–14, content scoring; registered as `self-attentive-words`, since the
decoder's `self-attentive` keeps the start symbol, as its released code does);
`self-attentive-with-start` (ours) the same over w_r … w_t (the decoder's `self-attentive`); and
`none`, the papers' LSTM baseline, g_t = tanh(W_s s_t + b) without W_d or d_t.

d_t restarts at every sentence: the </s> that ends a sentence is the start symbol
y_0 of the next one (r is its position), so a sentence's summary is exactly what
the translation decoder's is; the LSTM state runs on across sentences.  The summary
is computed for a whole segment at once (TargetContext.stream) and its state is carried
across truncated-BPTT segments with the LSTM state.
"""
from __future__ import annotations

import torch
from torch import nn

from ctxnmt.data.vocab import EOS
from ctxnmt.errors import ConfigError
from ctxnmt.lm.config import NO_SUMMARY, LMModelConfig, registered_name
from ctxnmt.models import components  # noqa: F401  (the summaries' registry entries)
from ctxnmt.models.functional import linear_cross_entropy
from ctxnmt.models.registry import TARGET_CONTEXTS

State = dict[str, torch.Tensor]


def check_summary(cfg: LMModelConfig) -> None:
    """The summary is a registered target context that reads only the words, checked before the
    data is read (as nmt.check_names checks a translation model's components)."""
    summary = cfg.summary != NO_SUMMARY and TARGET_CONTEXTS.get(registered_name(cfg.summary), "model.summary")
    if summary and summary.reads_decoder:
        raise ConfigError(f"model.summary '{cfg.summary}' reads the decoder's state or context vector, "
                          "which a language model has not")


class ResidualLM(nn.Module):
    def __init__(self, cfg: LMModelConfig, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        E, H = cfg.emb_dim, cfg.hidden_dim
        self.embedding = nn.Embedding(vocab_size, E)
        self.lstm = nn.LSTM(E, H, cfg.layers, batch_first=True, dropout=cfg.dropout if cfg.layers > 1 else 0.0)
        self.summary = None
        if cfg.summary != NO_SUMMARY:  # (created before W_s: a seed gives the weights it gave before `none`)
            self.summary = TARGET_CONTEXTS.get(registered_name(cfg.summary)).from_config(cfg, hidden_dim=H)
        self.from_state = nn.Linear(H, E)  # W_s (carries the bias b)
        if self.summary is not None:
            self.from_summary = nn.Linear(E, E, bias=False)  # W_d
        self.out_bias = nn.Parameter(torch.zeros(vocab_size))
        self.out_weight = None if cfg.tie_embeddings else nn.Parameter(torch.empty(vocab_size, E))
        self.dropout = nn.Dropout(cfg.dropout)
        with torch.no_grad():
            # N(0, 1) embeddings would start a tied softmax with logits of deviation √e.
            self.embedding.weight.normal_(0.0, E ** -0.5)
            if self.out_weight is not None:
                self.out_weight.normal_(0.0, E ** -0.5)

    def output_weight(self) -> torch.Tensor:
        return self.embedding.weight if self.out_weight is None else self.out_weight

    def initial_state(self, streams: int) -> State:
        """The state before any text: zero LSTM state, no summary yet."""
        zeros = self.embedding.weight.new_zeros(self.cfg.layers, streams, self.cfg.hidden_dim)
        return {"h": zeros, "c": zeros.clone(), "summary": {}}

    def forward(self, tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """g_t for a segment of tokens (B, T), continuing from `state`; returns g (B, T, e) and the new state."""
        emb = self.dropout(self.embedding(tokens))
        S, (h, c) = self.lstm(emb, (state["h"], state["c"]))
        if self.summary is None:
            return torch.tanh(self.from_state(self.dropout(S))), {**state, "h": h, "c": c}
        D, summary = self.summary.stream(emb, tokens == EOS, state["summary"] or None)
        g = torch.tanh(self.from_state(self.dropout(S)) + self.from_summary(D))
        return g, {"h": h, "c": c, "summary": summary}

    def logits(self, g: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(self.dropout(g), self.output_weight(), self.out_bias)

    def loss(self, tokens, targets, state: State) -> tuple[torch.Tensor, State]:
        """Summed negative log-likelihood of the targets, and the state after the segment."""
        g, state = self(tokens, state)
        E = g.size(-1)
        nll = linear_cross_entropy(self.dropout(g).reshape(-1, E), self.output_weight(), self.out_bias,
                                   targets.reshape(-1))
        return nll, state

    def token_logprobs(self, tokens, targets, state: State) -> tuple[torch.Tensor, State]:
        """log p(target) for every position (B, T), and the state after the segment."""
        g, state = self(tokens, state)
        logp = torch.log_softmax(self.logits(g), dim=-1)
        return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), state


def detach(state):
    """Truncated BPTT: keep the values, cut the gradient path into earlier segments."""
    if isinstance(state, dict):
        return {k: detach(v) for k, v in state.items()}
    return state.detach()
