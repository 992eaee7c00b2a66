"""Target-context summaries d_t: what the deep output sees of the words generated
so far (Miculicich Werlen et al.: target-side attentive residual connections).

Each summary works in two modes that give the same numbers (tests check it):

  full(Y, mask, S, C)    all steps at once for teacher forcing, after the
                         decoder recurrence; Y holds the shifted target
                         embeddings [y_0, E y_1, …, E y_{T-1}], S and C the
                         decoder states s_t and context vectors c_t
  init_state / step      one step at a time for beam search, carrying a State
                         of per-row entries (ctxnmt.models.state; reordered
                         with the beam)

Position 0 is the start symbol y_0: a zero vector by default (the authors'
released code), a learned vector with model.learned_start.  So d_1 is y_0 for
every summary.  The self-attentive summaries keep the start slot in every later
softmax, as the authors' released code does (idiap/Attentive_Residual_Connections_NMT,
`cond_att_layer` attends over positions 0 … t−1 of the shifted embeddings); the
mean follows the paper's eq. 9, which leaves y_0 out (no released code for it).
"""
from __future__ import annotations

import torch
from torch import nn

from ctxnmt.errors import ConfigError
from ctxnmt.models.functional import additive_energy
from ctxnmt.models.registry import TARGET_CONTEXTS
from ctxnmt.models.settings import ComponentSection
from ctxnmt.models.state import State


# exp(START_SCORE) is 0 in float32 and bfloat16 (their smallest subnormal is about e^-103): a
# start symbol scored so has no weight once any word follows it, and all of it while none does
START_SCORE = -1e4
SELF_ATTENTION = "self-attention over the previous target words"  # the self-attentive summaries' plain words


class TargetContext(nn.Module):
    attends_to_previous_words = False  # whether `weights` has the attention α over y_0 … y_{t-1}
    reads_decoder = False  # whether d_t reads the decoder's s_t or c_t (a language model has no c_t)
    words: str | None = None  # as Encoder.words ("": nothing to say, as of the baseline's)

    def __init__(self, emb_dim: int, **_):
        super().__init__()
        self.out_dim = emb_dim

    @classmethod
    def from_config(cls, cfg: ComponentSection, hidden_dim: int = 0, ctx_dim: int = 0) -> TargetContext:
        """Built from a model section, a translation model's or a language model's (its
        emb_dim), and the sizes of the decoder it serves; a summary with settings of its
        own (registered with `settings=`) reads them here with `cfg.settings`."""
        return cls(emb_dim=cfg.emb_dim, hidden_dim=hidden_dim, ctx_dim=ctx_dim)

    def stream(self, emb: torch.Tensor, starts: torch.Tensor,
               state: dict[str, torch.Tensor] | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """d_t along a language model's text, a segment at a time: `emb` (B, T, e) the words
        read, `starts` (B, T) where a sentence's start symbol is read (the summary restarts
        there, as the decoder's does at y_0), `state` what the segment before left (None: the
        text's start).  Returns d (B, T, e) and the state after the segment.  Here one step
        at a time; a summary with a faster form overrides it."""
        fresh = self.init_state(emb.size(0), emb)
        current = fresh if state is None else State().rows(**state)
        out = []
        for t in range(emb.size(1)):
            restart = starts[:, t].view(-1, 1)
            current = State().rows(**{k: torch.where(restart, fresh[k], v) for k, v in current.items()})
            d, current = self.step(current, emb[:, t])
            out.append(d)
        return torch.stack(out, 1), dict(current.items())

    def full(self, prev_emb, mask, states=None, contexts=None):  # pragma: no cover
        raise NotImplementedError

    def init_state(self, rows: int, like: torch.Tensor) -> State:
        return State()

    def step(self, state, prev_emb, s=None, c=None):  # pragma: no cover
        raise NotImplementedError

    def weights(self, prev_emb, mask, states=None, contexts=None) -> torch.Tensor:
        """Causal attention weights α (B, T, T) over [y_0, …, y_{T-1}] with d = α · prev_emb:
        row t-1 holds α_t over y_0 … y_{t-1}.  Only self-attentive summaries have them."""
        raise ConfigError(f"the {type(self).__name__} summary has no attention over previous words "
                          f"(only the self-attentive target contexts have one)")


def prefix_average(x: torch.Tensor, e: torch.Tensor, state: dict[str, torch.Tensor] | None = None,
                   starts: torch.Tensor | None = None, block: int = 16):
    """Causal weighted prefix averages d_t = Σ_{r_t ≤ i ≤ t} softmax_i(e_i) x_i.

    x (B, T, E) and scores e (B, T).  `state` continues an earlier prefix (the
    sums `num` (B, E), `den` (B,) and their reference score `max` (B,), as this
    function returns them; none: an empty prefix).  `starts` (B, T, bool) marks
    positions where a new prefix begins (r_t is the last such position ≤ t; the
    carried prefix counts only before the first one); none: one prefix throughout.
    Returns d (B, T, E) and the state after position T.

    O(T·L) in blocks of L positions, never a T × T matrix: within a block a small
    L × L causal weight matrix, across blocks the carried sums rescaled to the
    running maximum score, so the largest weight of every prefix is exactly 1 and
    nothing under- or overflows."""
    B, T, E = x.shape
    if state is None:
        state = {"num": x.new_zeros(B, E), "den": x.new_zeros(B), "max": x.new_full((B,), float("-inf"))}
    num, den, run_max = state["num"], state["den"], state["max"]
    out = []
    for first in range(0, T, block):
        e_b, x_b = e[:, first: first + block], x[:, first: first + block]
        L = e_b.size(1)
        allowed = torch.ones(L, L, dtype=torch.bool, device=e.device).tril().expand(B, L, L)
        if starts is None:
            carried = torch.ones(B, L, dtype=torch.bool, device=e.device)
        else:
            prefix_id = starts[:, first: first + L].long().cumsum(1)  # 0: continues the carried prefix
            allowed = allowed & (prefix_id.unsqueeze(2) == prefix_id.unsqueeze(1))
            carried = prefix_id == 0
        # Each position's reference is the maximum score of its own prefix.
        ref = e_b.detach().unsqueeze(1).masked_fill(~allowed, float("-inf")).amax(-1)  # (B, L)
        ref = torch.where(carried, torch.maximum(run_max.unsqueeze(1), ref), ref)
        w = torch.exp((e_b.unsqueeze(1) - ref.unsqueeze(2)).masked_fill(~allowed, float("-inf")))  # (B, L, L)
        carry = torch.where(carried, torch.exp(run_max.unsqueeze(1) - ref), torch.zeros_like(ref))
        num_b = carry.unsqueeze(-1) * num.unsqueeze(1) + torch.bmm(w, x_b)
        den_b = carry * den.unsqueeze(1) + w.sum(-1)
        out.append(num_b / den_b.unsqueeze(-1))
        num, den, run_max = num_b[:, -1], den_b[:, -1], ref[:, -1]
    return torch.cat(out, dim=1), {"num": num, "den": den, "max": run_max}


@TARGET_CONTEXTS.register("previous")
class PreviousWord(TargetContext):
    """The baseline: d_t = E y_{t-1}."""

    words = ""  # the previous target word, as every RNNsearch reads it

    def full(self, prev_emb, mask, states=None, contexts=None):
        return prev_emb

    def step(self, state, prev_emb, s=None, c=None):
        return prev_emb, state

    def stream(self, emb, starts, state=None):
        return emb, {}


def prefix_stream(emb: torch.Tensor, scores: torch.Tensor, starts: torch.Tensor, state, words_only: bool):
    """TargetContext.stream of a summary that is a weighted prefix average of the words'
    embeddings (`scores` their weights' logits), in O(T); `words_only`: the start symbol is
    no word of the average (it is d_t only while no word follows it)."""
    if words_only:
        scores = scores.masked_fill(starts, START_SCORE)
    return prefix_average(emb, scores, state, starts=starts)


@TARGET_CONTEXTS.register("mean")
class MeanResidual(TargetContext):
    """The mean residual connection as published: eq. 9 of the self-attentive residual
    decoder paper (eq. 11 of the target-side attentive one),

        d_t = 1/(t−1) Σ_{i=1}^{t−1} E y_i,

    the plain mean of the words generated so far, the start symbol y_0 not among them.
    At t = 1 nothing has been generated and the equation is undefined; d_1 is the start
    vector y_0, as for every other summary (zero by default: the baseline's y_0).
    No parameters; a running sum while decoding."""

    words = "the mean of the previous target words as target context"

    def full(self, prev_emb, mask, states=None, contexts=None):
        words = prev_emb[:, 1:]  # E y_1 … E y_{T-1}
        steps = torch.arange(1, words.size(1) + 1, device=prev_emb.device, dtype=prev_emb.dtype)
        return torch.cat([prev_emb[:, :1], words.cumsum(1) / steps.view(1, -1, 1)], dim=1)

    def init_state(self, rows, like):
        # The count starts at −1 so that the first step, which reads y_0, counts 0 words.
        return State().rows(mean_sum=like.new_zeros(rows, self.out_dim), mean_count=like.new_full((rows, 1), -1.0))

    def step(self, state, prev_emb, s=None, c=None):
        count = state["mean_count"] + 1
        first = count == 0  # this step reads y_0: d_1 = y_0, and y_0 stays out of the sum
        total = state["mean_sum"] + torch.where(first, torch.zeros_like(prev_emb), prev_emb)
        d = torch.where(first, prev_emb, total / count.clamp(min=1))
        return d, State().rows(mean_sum=total, mean_count=count)

    def stream(self, emb, starts, state=None):
        return prefix_stream(emb, emb.new_zeros(emb.shape[:2]), starts, state, words_only=True)


@TARGET_CONTEXTS.register("mean-with-start")
class MeanWithStartResidual(TargetContext):
    """Ours, not the papers': d_t = (1/t) Σ_{i=0}^{t−1} E y_i, the mean with the start slot
    y_0 counted as a word, i.e. (t−1)/t of eq. 9's value (half of it at t = 2) while y_0 is
    zero.  What `mean` computed before it followed eq. 9; the results rows trained with it
    are labelled so (docs/results.md)."""

    words = "the mean of the previous target words and the start symbol as target context"

    def full(self, prev_emb, mask, states=None, contexts=None):
        steps = torch.arange(1, prev_emb.size(1) + 1, device=prev_emb.device, dtype=prev_emb.dtype)
        return prev_emb.cumsum(1) / steps.view(1, -1, 1)

    def init_state(self, rows, like):
        return State().rows(mean_sum=like.new_zeros(rows, self.out_dim), mean_count=like.new_zeros(rows, 1))

    def step(self, state, prev_emb, s=None, c=None):
        total, count = state["mean_sum"] + prev_emb, state["mean_count"] + 1
        return total / count, State().rows(mean_sum=total, mean_count=count)

    def stream(self, emb, starts, state=None):
        return prefix_stream(emb, emb.new_zeros(emb.shape[:2]), starts, state, words_only=False)


@TARGET_CONTEXTS.register("self-attentive")
class ContentSelfAttentiveResidual(TargetContext):
    """d_t = Σ_{i<t} α_ti E y_i with α_t = softmax_i(vᵀ tanh(W_y E y_i)) (the papers'
    "simple"/content scoring, their best).

    The scores do not depend on t, so d_t is a causal weighted prefix average,
    computed in O(n·L) per sentence (blocks of L = 16 positions, never an n×n
    matrix): within a block a small L×L causal weight matrix, across blocks
    carried sums rescaled to the running maximum score (a numerically stable
    log-sum-exp).  While decoding, O(1) per step from the same carried sums."""

    attends_to_previous_words = True
    words = SELF_ATTENTION
    block = 16
    words_only = False  # the start slot y_0 is a key of every softmax (the released code)

    def __init__(self, emb_dim: int, **_):
        super().__init__(emb_dim)
        self.W_y = nn.Linear(emb_dim, emb_dim)
        self.v = nn.Linear(emb_dim, 1, bias=False)

    def scores(self, prev_emb: torch.Tensor) -> torch.Tensor:
        return self.v(torch.tanh(self.W_y(prev_emb))).squeeze(-1)

    def slot_scores(self, prev_emb: torch.Tensor) -> torch.Tensor:
        """The scores (B, T) of the slots y_0, E y_1, …: the start slot's too, unless `words_only`."""
        scores = self.scores(prev_emb)
        if self.words_only:
            scores = torch.cat([torch.full_like(scores[:, :1], START_SCORE), scores[:, 1:]], dim=1)
        return scores

    def full(self, prev_emb, mask, states=None, contexts=None):
        # padding lies after every real position: causality excludes it
        return prefix_average(prev_emb, self.slot_scores(prev_emb), block=self.block)[0]

    def weights(self, prev_emb, mask, states=None, contexts=None):
        # For analysis only: the n×n matrix that `full` avoids forming.
        return _causal_softmax(self.slot_scores(prev_emb).unsqueeze(1).expand(-1, prev_emb.size(1), -1))

    def init_state(self, rows, like):
        return State().rows(sa_num=like.new_zeros(rows, self.out_dim), sa_den=like.new_zeros(rows, 1),
                            sa_max=like.new_full((rows, 1), float("-inf")))

    def word_score(self, state, prev_emb) -> torch.Tensor:
        """The score (R, 1) of the word this step reads."""
        return self.scores(prev_emb).unsqueeze(-1)

    def step(self, state, prev_emb, s=None, c=None):
        e = self.word_score(state, prev_emb)  # (R, 1)
        new_max = torch.maximum(state["sa_max"], e)
        carry, w = torch.exp(state["sa_max"] - new_max), torch.exp(e - new_max)
        num = state["sa_num"] * carry + w * prev_emb
        den = state["sa_den"] * carry + w
        return num / den, State().rows(sa_num=num, sa_den=den, sa_max=new_max)

    def stream(self, emb, starts, state=None):
        return prefix_stream(emb, self.scores(emb), starts, state, words_only=self.words_only)


@TARGET_CONTEXTS.register("self-attentive-words")
class ContentSelfAttentiveWords(ContentSelfAttentiveResidual):
    """The content self-attentive residual over the generated words alone, as eqs. 12–14
    sum (i from 1): d_t = Σ_{1≤i<t} α_ti E y_i, the start slot y_0 no key of the softmax;
    d_1 = y_0, where no word is there yet.  The language model's `self-attentive` (its
    section reuses the equations); the decoder's `self-attentive` follows the released
    code, which keeps y_0 in every softmax."""

    words_only = True

    def word_score(self, state, prev_emb):
        first = torch.isinf(state["sa_max"])  # this step reads y_0
        return torch.where(first, torch.full_like(state["sa_max"], START_SCORE), self.scores(prev_emb).unsqueeze(-1))


class QuerySelfAttentiveResidual(TargetContext):
    """Self-attentive residual whose scores depend on the current step through a
    query (the context vector c_t or the decoder state s_t), so α_t is recomputed
    over all previous words at every step: O(t) per decoding step, a causal
    (T × T) score matrix under teacher forcing.  Subclasses define `energy`."""

    attends_to_previous_words = True
    words = SELF_ATTENTION
    reads_decoder = True
    query = "context"  # which decoder quantity the scores read: "context" (c_t) or "state" (s_t)
    additive = True  # vᵀ tanh(…) of W_y E y_i and the query; False: the keys are E y_i themselves

    def __init__(self, emb_dim: int, hidden_dim: int = 0, ctx_dim: int = 0, **_):
        super().__init__(emb_dim)
        query_dim = ctx_dim if self.query == "context" else hidden_dim
        self.W_q = nn.Linear(query_dim, emb_dim, bias=False)  # the papers' W_c (or W_s for the scope)
        if self.additive:
            self.W_y = nn.Linear(emb_dim, emb_dim)
            self.v = nn.Linear(emb_dim, 1, bias=False)

    def keys(self, prev: torch.Tensor) -> torch.Tensor:
        return self.W_y(prev) if self.additive else prev

    def energy(self, keys: torch.Tensor, prev: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Scores (B, T_q, T_k) of projected keys W_y E y_i (B, T_k, e), embeddings E y_i
        (B, T_k, e) and projected queries (B, T_q, e)."""
        raise NotImplementedError

    def _query(self, s, c):
        return self.W_q(c if self.query == "context" else s)

    def weights(self, prev_emb, mask, states=None, contexts=None):
        return _causal_softmax(self.energy(self.keys(prev_emb), prev_emb, self._query(states, contexts)))

    def full(self, prev_emb, mask, states=None, contexts=None):
        return torch.bmm(self.weights(prev_emb, mask, states, contexts), prev_emb)

    def init_state(self, rows, like):
        return State().rows(sa_prev=like.new_zeros(rows, 0, self.out_dim))  # E y_0 … E y_{t-1}

    def step(self, state, prev_emb, s=None, c=None):
        prev = torch.cat([state["sa_prev"], prev_emb.unsqueeze(1)], dim=1)  # (R, t, e)
        e = self.energy(self.keys(prev), prev, self._query(s, c).unsqueeze(1))  # (R, 1, t)
        d = torch.bmm(torch.softmax(e, dim=-1), prev).squeeze(1)
        return d, State().rows(sa_prev=prev)


def _causal_softmax(e: torch.Tensor) -> torch.Tensor:
    """softmax over the last axis of scores (B, T, T), row t restricted to columns ≤ t."""
    T = e.size(-1)
    causal = torch.ones(T, T, dtype=torch.bool, device=e.device).tril()
    return torch.softmax(e.masked_fill(~causal, float("-inf")), dim=-1)


@TARGET_CONTEXTS.register("self-attentive-sum")
class SumSelfAttentiveResidual(QuerySelfAttentiveResidual):
    """e_ti = vᵀ tanh(W_y E y_i + W_c c_t)."""

    def energy(self, keys, prev, q):
        return additive_energy(keys, q, self.v.weight[0])


@TARGET_CONTEXTS.register("self-attentive-product")
class ProductSelfAttentiveResidual(QuerySelfAttentiveResidual):
    """e_ti = vᵀ tanh(W_y E y_i ⊙ W_c c_t)."""

    def energy(self, keys, prev, q):
        return self.v(torch.tanh(keys.unsqueeze(1) * q.unsqueeze(2))).squeeze(-1)


@TARGET_CONTEXTS.register("self-attentive-dot")
class DotSelfAttentiveResidual(QuerySelfAttentiveResidual):
    """e_ti = (E y_i)ᵀ W_c c_t: no W_y or v."""

    additive = False

    def energy(self, keys, prev, q):
        return torch.bmm(q, prev.transpose(1, 2))


@TARGET_CONTEXTS.register("self-attentive-scope")
class ScopeSelfAttentiveResidual(SumSelfAttentiveResidual):
    """content+scope: e_ti = vᵀ tanh(W_y E y_i + W_s s_t), the sum's energy with the state as query."""

    query = "state"
