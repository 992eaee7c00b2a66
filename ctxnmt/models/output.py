"""Output layers: from the decoder state s_t, the target summary d_t and the context
vector c_t to the readout t_t, with p(y_t) = softmax(W_o t_t).  Registered under
`model.output`; `extra` is an additional pre-activation term a decoder variant
contributes (the self-attentive-RNN's W_mt s̃_t)."""
from __future__ import annotations


import torch
from torch import nn

from ctxnmt.errors import ConfigError
from ctxnmt.models.registry import OUTPUTS
from ctxnmt.models.settings import ComponentSection, ReadoutSettings


# The weights' names, in the order of `weights`' first axis.
OUTPUT_WEIGHTS = ("alpha_s", "alpha_y", "alpha_c")


def readout_dim(cfg: ComponentSection) -> int:
    """The size of the readout t_t, which the output layer and W_o share."""
    settings = cfg.settings(ReadoutSettings)
    return settings.out_dim or settings.emb_dim


@OUTPUTS.register("deep")
class DeepOutput(nn.Module):
    """t_t = tanh(W_st s_t + W_yt d_t + W_ct c_t)."""

    weighs_sources = False  # whether `weights` has the weights α of s_t, d_t and c_t

    def __init__(self, state_dim: int, summary_dim: int, ctx_dim: int, out_dim: int):
        super().__init__()
        self.from_state = nn.Linear(state_dim, out_dim)  # W_st (carries the single bias)
        self.from_summary = nn.Linear(summary_dim, out_dim, bias=False)  # W_yt (W_dt with a target context)
        self.from_context = nn.Linear(ctx_dim, out_dim, bias=False)  # W_ct
        self.out_dim = out_dim

    def terms(self, s: torch.Tensor, d: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """The three readout projections stacked as (3, …, out_dim): state, summary, context."""
        return torch.stack([self.from_state(s), self.from_summary(d), self.from_context(c)])

    def forward(self, s: torch.Tensor, d: torch.Tensor, c: torch.Tensor, extra: torch.Tensor | None = None):
        pre = self.from_state(s) + self.from_summary(d) + self.from_context(c)
        return torch.tanh(pre if extra is None else pre + extra)

    def weights(self, s, d, c, terms: torch.Tensor | None = None) -> torch.Tensor:
        """α (3, …, out_dim): the weights of state, summary and context, where `weighs_sources`."""
        raise ConfigError(f"the {type(self).__name__} layer does not weigh its sources (only the adaptive outputs do)")


@OUTPUTS.register("adaptive")
class AdaptiveOutput(DeepOutput):
    """Adaptive output state (Li, Li, Zhang, eqs. 18–21), in the form of the authors' released code:

      o_k = P_k x_k for (x_k, P_k) = (s_t, W_st), (d_t, W_yt), (c_t, W_ct)   the usual projections
      õ_t = o_s + o_y + o_c                                                 the query
      e_k = W_p tanh(W_m (M_k x_k + b_k) + W_r õ_t + b_r)                   one score per dimension
      α_k = softmax over k ∈ {s, y, c} of e_k, dimension by dimension
      t_t = tanh(K (α_s ⊙ o_s + α_y ⊙ o_y + α_c ⊙ o_c) [+ extra]),  K = 1

    M_k (out × dim x_k, with bias) are per-source score projections; the square
    W_m, W_r, W_p are shared by the three sources.  A decoder's extra term is added
    unweighted, as to the deep output.  K = 1 is the paper and its code;
    `adaptive-gain3` is our variant with K = 3."""

    weighs_sources = True
    gain = 1.0

    def __init__(self, state_dim: int, summary_dim: int, ctx_dim: int, out_dim: int):
        super().__init__(state_dim, summary_dim, ctx_dim, out_dim)
        self.score_state = nn.Linear(state_dim, out_dim)  # M_s
        self.score_summary = nn.Linear(summary_dim, out_dim)  # M_y
        self.score_context = nn.Linear(ctx_dim, out_dim)  # M_c
        self.W_m = nn.Linear(out_dim, out_dim, bias=False)
        self.W_r = nn.Linear(out_dim, out_dim)
        self.W_p = nn.Linear(out_dim, out_dim, bias=False)

    def weights(self, s, d, c, terms: torch.Tensor | None = None) -> torch.Tensor:
        """α (3, …, out_dim): the weights of state, summary and context, summing to one."""
        terms = self.terms(s, d, c) if terms is None else terms
        own = torch.stack([self.score_state(s), self.score_summary(d), self.score_context(c)])
        e = self.W_p(torch.tanh(self.W_m(own) + self.W_r(terms.sum(0))))
        return torch.softmax(e, dim=0)

    def forward(self, s, d, c, extra=None):
        terms = self.terms(s, d, c)
        pre = self.gain * (self.weights(s, d, c, terms) * terms).sum(0)
        return torch.tanh(pre if extra is None else pre + extra)


@OUTPUTS.register("adaptive-gain3")
class Gain3AdaptiveOutput(AdaptiveOutput):
    """Ours, not the paper's: the adaptive output with K = 3.  The weights start near 1/3
    each, so with K = 1 the readout's pre-activation, and every step the optimiser takes on
    W_st, W_yt and W_ct as seen through it, is a third of the deep output's; with K equal to
    the number of sources uniform weights give exactly the deep output.  K folds into the
    three projections, so the family of functions is the paper's; where training starts
    and how fast the readout moves are not.  α itself still sums to one (what `analyze
    gates` reports)."""

    gain = 3.0
