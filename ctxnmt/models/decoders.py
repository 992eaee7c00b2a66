"""Decoders (ctxnmt.models.interfaces.Decoder): from annotations and previous target
words to readout vectors t_t.

A decoder has two modes that must agree to 1e-5 (tests check it):
  forward(enc, prev_emb, tgt_mask)   teacher forcing over a whole batch
  init_state(enc) / step(...)        one step at a time, as beam search runs it

Both read the encoder side that `prepare` declares, and search carries the decoder
state that `init_state` and `step` declare (ctxnmt.models.state): a variant adds
its entries there with their kinds and never needs to tell search anything else.
"""
from __future__ import annotations

import torch
from torch import nn

from ctxnmt.models.attention import AdditiveAttention
from ctxnmt.models.cells import RecurrentCell
from ctxnmt.models.document import input_from_config as document_input
from ctxnmt.models.functional import additive_energy, mix, read_each_every_step, step_product
from ctxnmt.models.interfaces import Decoder
from ctxnmt.models.output import readout_dim
from ctxnmt.models.packed import kept
from ctxnmt.models.registry import CELLS, DECODERS, OUTPUTS, TARGET_CONTEXTS
from ctxnmt.models.settings import ModelConfig
from ctxnmt.models.state import State


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(1) / m.sum(1).clamp(min=1.0)


@DECODERS.register("cgru")
class ConditionalGRUDecoder(Decoder):
    """dl4mt's conditional GRU with additive attention.

    s'_t = GRU_1(E y_{t-1}, s_{t-1});  α_t = softmax_i(v_aᵀ tanh(W_d s'_t + W_e h_i))
    c_t = Σ_i α_ti h_i;  s_t = GRU_2(c_t, s'_t);  s_0 = tanh(W_init · mean_i h_i).

    Speed without changing the arithmetic: GRU_2's input term W c_t + b equals
    Σ_i α_ti (W h_i + b) because α_t sums to one.  While training, W h_i + b is
    computed once per sentence and each step only mixes it with α_t; c_t itself
    is needed only by the deep output and is formed for all steps at once after
    the loop.  In search with beams the K rows of a sentence share those values,
    so `prepare` forms them for a beam; greedy search (one row per sentence)
    instead multiplies c_t, which the step forms anyway: the same products, and
    no (N, S, 3H) values to read at every step.
    """

    words = "conditional GRU decoder"

    def __init__(self, emb_dim: int, hidden_dim: int, att_dim: int, ctx_dim: int, out_dim: int,
                 config: ModelConfig, **_):
        """`config`: the model section, which names the cell, target context, output and
        document input, each of which reads its own settings there."""
        super().__init__()
        cell_cls = CELLS.get(config.cell)
        self.hidden_dim, self.att_dim, self.out_dim = hidden_dim, att_dim, out_dim
        self.init_proj = nn.Linear(ctx_dim, hidden_dim)
        self.gru1 = cell_cls(emb_dim, hidden_dim)
        self.attention = AdditiveAttention(hidden_dim, ctx_dim, att_dim)
        self.gru2 = cell_cls.second_transition()(ctx_dim, hidden_dim)
        self.summary = TARGET_CONTEXTS.get(config.target_context).from_config(config, hidden_dim=hidden_dim,
                                                                              ctx_dim=ctx_dim)
        self.output = OUTPUTS.get(config.output)(hidden_dim, self.summary.out_dim, ctx_dim, out_dim)
        self.dropout_hidden = nn.Dropout(config.dropout_hidden)
        self.document = document_input(config, hidden_dim, emb_dim, ctx_dim, self.gru2.n_blocks)

    @classmethod
    def from_config(cls, cfg: ModelConfig, ctx_dim: int) -> Decoder:
        return cls(cfg.emb_dim, cfg.hidden_dim, cfg.att_dim, ctx_dim, readout_dim(cfg), config=cfg)

    # -- encoder-side work, once per sentence ---------------------------------------
    def prepare(self, annotations: torch.Tensor, src_mask: torch.Tensor, doc: torch.Tensor | None = None,
                beam: int = 1) -> State:
        """The encoder side, per sentence.  `doc` is the document summary D (B, doc_dim)
        of a document-context model."""
        enc = State().positions(annotations=annotations, src_mask=src_mask,
                                keys=self.attention.precompute(annotations))
        enc.shared(**kept(tuple(self.parameters()), "_step_weights", self.step_weights))
        # GRU_2's input terms per annotation (the class docstring): they pay where a beam's rows
        # share them, or where gradients flow, which read_every_step then forms once for all steps.
        if beam > 1 or annotations.requires_grad:
            enc.positions(values=self.gru2.input_proj(annotations))
        self.document.prepare(enc, doc, self.gru2)
        return read_each_every_step(enc)

    def step_weights(self) -> dict[str, torch.Tensor]:
        """Matrices every step multiplies with: U of GRU_1, and [W_d, U] of attention and GRU_2
        (s'_t feeds both: one product serves both).  Gathered once per batch in training, and
        in search once until the weights change (packed.kept)."""
        return {"U1": self.gru1.hidden_weight(), "Wq": self._query_weight()}

    def initial_state(self, enc: State) -> torch.Tensor:
        pre = self.init_proj(masked_mean(enc["annotations"], enc["src_mask"]))
        return torch.tanh(self.document.initial_preactivation(enc, pre))

    def _query_weight(self) -> torch.Tensor:
        return torch.cat([self.attention.query_proj.weight.t(), self.gru2.hidden_weight()], dim=1)

    def _transition(self, enc, s, xp1_t, doc_t=None):
        """s_t, α_t and c_t (None where it was not formed).  `doc_t`: the document
        input's per-step terms of E y_{t-1} (None for most)."""
        s1 = self.gru1.combine(xp1_t, step_product(s, enc["U1"]), s)
        q = step_product(s1, enc["Wq"])
        alpha = self.attention.weights(q[:, : self.att_dim], enc["keys"], enc["src_mask"])
        xp2, c = self._gru2_input(enc, alpha)
        xp2, hp2 = self.document.gru2_terms(enc, xp2, self._gru2_recurrent(enc, q, s), s, s1, alpha, doc_t)
        return self.gru2.combine(xp2, hp2, s1), alpha, c

    def _gru2_recurrent(self, enc, q, s_prev):
        """GRU_2's recurrent terms U s'_t, formed with the attention query in one product."""
        return q[:, self.att_dim:]

    def _gru2_input(self, enc, alpha):
        """W c_t + b, and c_t where it was formed on the way (see the class docstring)."""
        if "values" in enc:
            return mix(alpha, enc["values"]), None
        c = mix(alpha, enc["annotations"])
        return self.gru2.input_proj(c), c

    # -- teacher forcing ---------------------------------------------------------
    def forward(self, enc, prev_emb: torch.Tensor, tgt_mask: torch.Tensor):
        """Returns readout vectors (B, T, out_dim) and attention weights (B, T, S)."""
        S, D, C, A = self.readout_inputs(enc, prev_emb, tgt_mask)
        return self.output(self.dropout_hidden(S), D, C, self.output_extra(S)), A

    def readout_inputs(self, enc, prev_emb: torch.Tensor, tgt_mask: torch.Tensor):
        """States s_t, summaries d_t and context vectors c_t (B, T, ·) and attention (B, T, S)."""
        S, C, A = self._states_and_contexts(enc, prev_emb)
        return S, self.summary.full(prev_emb, tgt_mask, S, C), C, A

    def _states_and_contexts(self, enc, prev_emb: torch.Tensor):
        S, A = self.recurrence(enc, prev_emb)
        return S, torch.bmm(A, enc["annotations"]), A

    def recurrence(self, enc, prev_emb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Decoder states s_1 … s_T (B, T, H) and attention weights (B, T, S) under teacher forcing."""
        s = self.initial_state(enc)
        xp1 = self.gru1.input_proj(prev_emb)
        doc_in = self.document.input_terms(prev_emb)
        doc_steps = doc_in.unbind(1) if doc_in is not None else [None] * xp1.size(1)
        states, alphas = [], []
        for xp1_t, doc_t in zip(xp1.unbind(1), doc_steps):  # unbind: a per-step slice has a costly backward
            s, alpha, _ = self._transition(enc, s, xp1_t, doc_t)
            states.append(s)
            alphas.append(alpha)
        return torch.stack(states, dim=1), torch.stack(alphas, dim=1)

    def output_extra(self, S: torch.Tensor) -> torch.Tensor | None:
        """A variant's extra deep-output term for all steps (None: the plain cGRU)."""
        return None

    # -- incremental decoding ----------------------------------------------------
    def init_state(self, enc: State, beam: int = 1) -> State:
        """State rows for `beam` hypotheses per sentence (sentence-major): s_0, and the
        summary's state as the part "summary"."""
        s = self.initial_state(enc).repeat_interleave(beam, dim=0)
        return State().rows(s=s).with_part("summary", self.summary.init_state(s.size(0), s))

    def step(self, enc: State, state: State, prev_emb_t: torch.Tensor, word_input_t: torch.Tensor):
        """One step: readout (R, out_dim), new state, α_t (R, S); R = beam × sentences.
        `word_input_t`: GRU_1's input term for E y_{t-1} (`word_input`)."""
        s, d, c, extra, new, alpha = self._next_state(enc, state, prev_emb_t, word_input_t)
        return self.output(s, d, c, extra), new, alpha

    def forced_step(self, enc: State, state: State, prev_emb_t: torch.Tensor, word_input_t: torch.Tensor) -> State:
        """Without the deep output, and without c_t unless the summary reads it: nothing reads
        a forced word's readout."""
        return self._next_state(enc, state, prev_emb_t, word_input_t, readout=False)[4]

    def _next_state(self, enc: State, state: State, prev_emb_t, word_input_t, readout: bool = True):
        """s_t, d_t, c_t (None where neither the readout nor the summary reads it), the variant's
        output term, the new state and α_t of one step."""
        s, alpha, c, new = self.advance(enc, state, prev_emb_t, word_input_t)
        if c is None and (readout or self.summary.reads_decoder):
            c = mix(alpha, enc["annotations"])
        d, summary = self.summary.step(state.part("summary"), prev_emb_t, s, c)
        extra = self.output_extra_step(state, s, new)
        if "record" in state.parts:  # the step's inputs to the summary's and the output's weights
            new.with_part("record", State().rows(y=prev_emb_t, s=s, d=d, c=c))
        return s, d, c, extra, new.with_part("summary", summary), alpha

    def word_input(self, emb: torch.Tensor) -> torch.Tensor:
        """GRU_1's input term W E_y + b for embeddings (…, emb_dim); it depends on the word
        alone, so search may look it up per word (`word_input_parameters` says when to renew)."""
        return self.gru1.input_proj(emb)

    def word_input_parameters(self) -> list[torch.Tensor]:
        return list(self.gru1.parameters())

    def advance(self, enc: State, state: State, prev_emb_t, word_input_t):
        """s_t, α_t and c_t (or None) for one step, and the decoder's new state (its own
        entries; `step` adds the summary's)."""
        s, alpha, c = self._transition(enc, state["s"], word_input_t, self.document.input_terms(prev_emb_t))
        return s, alpha, c, State().rows(s=s)

    def output_extra_step(self, state: State, s: torch.Tensor, new: State) -> torch.Tensor | None:
        """A variant's extra deep-output term for one step; it declares its entries in `new`."""
        return None

    # -- what it can show ------------------------------------------------------------
    def recurrence_cells(self) -> dict[str, RecurrentCell]:
        """GRU_1, reading E y_{t-1}, then GRU_2, reading c_t."""
        return {"gru1": self.gru1, "gru2": self.gru2}

    def has_target_attention(self) -> bool:
        return self.summary.attends_to_previous_words

    def target_attention(self, enc, prev_emb, tgt_mask):
        S, C, _ = self._states_and_contexts(enc, prev_emb)
        return self.summary.weights(prev_emb, tgt_mask, S, C)

    def has_adaptive_output(self) -> bool:
        return self.output.weighs_sources

    def output_weights(self, enc, prev_emb, tgt_mask):
        S, D, C, _ = self.readout_inputs(enc, prev_emb, tgt_mask)
        return self.output.weights(S, D, C)

    def recording(self, state):
        # each step replaces the record with its own (a steady state, which graphs can replay)
        return state.with_part("record", State()) if self.has_target_attention() or self.has_adaptive_output() \
            else state

    def recorded(self, state):
        return state.part("record") if "record" in state.parts else None

    def signals(self, record):
        Y, S, D, C = (record[k] for k in ("y", "s", "d", "c"))
        found = {}
        if self.has_target_attention():
            found["target_attention"] = self.summary.weights(Y, None, S, C)
        if self.has_adaptive_output():
            found["output_weights"] = self.output.weights(S, D, C).mean(-1).permute(1, 2, 0)
        return found


@DECODERS.register("self-attentive-rnn")
class SelfAttentiveRNNDecoder(ConditionalGRUDecoder):
    """The cGRU plus an attention over its own previous states (Daniluk et al.,
    adapted as in Miculicich Werlen et al.'s comparison): the deep output gets
    W_mt s̃_t with s̃_t = Σ_{i<t} α_ti s_i, e_ti = vᵀ tanh(W_m s_i + W_s s_t).

    The query is the current state s_t, as the appendix's score has it; the memory holds
    s_1 … s_{t-1} (eq. 19), so s̃_1 = 0, the empty sum (nothing to attend to yet)."""

    words = "conditional GRU decoder that also attends to its own previous states"

    def __init__(self, emb_dim, hidden_dim, att_dim, ctx_dim, out_dim, **kwargs):
        super().__init__(emb_dim, hidden_dim, att_dim, ctx_dim, out_dim, **kwargs)
        self.W_m = nn.Linear(hidden_dim, hidden_dim)
        self.W_s = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.v_m = nn.Linear(hidden_dim, 1, bias=False)
        self.from_memory = nn.Linear(hidden_dim, out_dim, bias=False)  # W_mt

    def _scores(self, states: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """e (B, Q, M) of queries s_t (B, Q, H) over memory states s_i (B, M, H)."""
        return self.v_m(torch.tanh(self.W_m(states).unsqueeze(1) + self.W_s(queries).unsqueeze(2))).squeeze(-1)

    def output_extra(self, S):
        T = S.size(1)
        allowed = torch.ones(T, T, dtype=torch.bool, device=S.device).tril(-1)  # strictly earlier states
        e = self._scores(S, S).masked_fill(~allowed, float("-inf"))
        # Row-wise stable softmax; the first row has nothing to attend to and stays zero (s̃_1 = 0).
        row_max = e.detach().max(-1, keepdim=True).values.clamp(min=-1e30)
        w = torch.exp(e - row_max)
        alpha = w / w.sum(-1, keepdim=True).clamp(min=1e-30)
        return self.from_memory(torch.bmm(alpha, S))

    def init_state(self, enc, beam: int = 1):
        state = super().init_state(enc, beam)
        return state.rows(sar_mem=state["s"].new_zeros(state["s"].size(0), 0, self.hidden_dim))  # s_1 … s_{t-1}

    def output_extra_step(self, state, s, new):
        memory = state["sar_mem"]  # (R, t-1, H)
        if memory.size(1) == 0:
            tilde = torch.zeros_like(s)
        else:
            alpha = torch.softmax(self._scores(memory, s.unsqueeze(1)), dim=-1)  # (R, 1, t-1)
            tilde = torch.bmm(alpha, memory).squeeze(1)
        new.rows(sar_mem=torch.cat([memory, s.unsqueeze(1)], dim=1))
        return self.from_memory(tilde)


@DECODERS.register("memory-rnn")
class MemoryRNNDecoder(ConditionalGRUDecoder):
    """The cGRU whose recurrence reads an attention over its own previous states in
    place of s_{t-1} (Cheng et al.'s LSTMN, adapted in Miculicich Werlen et al.'s
    self-attentive residual decoder paper, eqs. 14–17 and appendix A.3.2):

      e_ti = vᵀ tanh(W_m s_i + b_m + W_q s̃_{t-1} + W_x E y_{t-1}),  i = 1 … t-1   (eq. 17)
      s̃_t = Σ_{i=1}^{t-1} softmax_i(e_ti) s_i                                     (eqs. 15–16)
      s'_t = GRU_1(E y_{t-1}, s̃_t)
      c_t  = attention(s'_t) as in the cGRU
      s_t  = z ⊙ s'_t + (1 − z) ⊙ tanh(W c_t + r ⊙ (U s̃_t)),  r, z from c_t and s̃_t  (A.3.2)

    Both transitions read s̃_t where the cGRU reads a previous state (the appendix's
    U, U_z, U_r act on s̃_t); the update keeps s'_t as the state it refines.  A.3.2's
    E y_{t-1} terms in the second transition come from the appendix's notation for the
    baseline (A.3), which the dl4mt cGRU the papers ran does not have, so they are left
    out as the baseline leaves them (docs/target-context.md).  The score
    reads e_ti = a(h_i, y_{t-1}, s̃_{t-1}) as eq. 17 has it (the appendix's W_s s_t cannot
    be: s_t is what the step computes).  The memory holds s_1 … s_{t-1}, the states the
    step has computed, and s_0 never enters it (eq. 15's sum and the appendix's
    normalisation start at i = 1).  Where the papers define nothing: at t = 1 the sum is
    empty, and s̃_1 = s_0, so the first step is the cGRU's (ours; s̃_1 = 0 would leave s_0
    unread); the query of t = 2 is then W_q s_0.  Padding comes after every real step, so
    causality keeps it out of the memory of real steps.  Cost: O(t) per step (the scores
    depend on the query); W_x E y is computed for all steps before the loop."""

    words = "conditional GRU decoder whose recurrence attends to its own previous states"

    def __init__(self, emb_dim, hidden_dim, att_dim, ctx_dim, out_dim, **kwargs):
        super().__init__(emb_dim, hidden_dim, att_dim, ctx_dim, out_dim, **kwargs)
        self.W_m = nn.Linear(hidden_dim, hidden_dim)  # carries the attention bias
        self.W_q = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.W_x = nn.Linear(emb_dim, hidden_dim, bias=False)
        self.v_m = nn.Linear(hidden_dim, 1, bias=False)

    def step_weights(self):
        return {**super().step_weights(), "U2": self.gru2.hidden_weight(),
                "Wm": self.W_m.weight.t(), "Wqm": self.W_q.weight.t()}

    def _query_weight(self):
        return self.attention.query_proj.weight.t()  # GRU_2's recurrent terms read s̃_t, not s'_t

    def _gru2_recurrent(self, enc, q, s_prev):
        return step_product(s_prev, enc["U2"])

    def _key(self, enc, s):
        """W_m s + b of a new memory entry."""
        return step_product(s, enc["Wm"]) + self.W_m.bias

    def _read(self, states, keys, query):
        """s̃_t (R, H) from memory states (R, M, H), their keys (R, M, H) and the query (R, H)."""
        alpha = torch.softmax(additive_energy(keys, query.unsqueeze(1), self.v_m.weight[0]).squeeze(1), dim=-1)
        return mix(alpha, states)

    def recurrence(self, enc, prev_emb):
        tilde = self.initial_state(enc)  # s̃_1 = s_0
        states, keys = [], []  # s_1 … s_{t-1} and their keys
        xp1, xq = self.gru1.input_proj(prev_emb), self.W_x(prev_emb)
        doc_in = self.document.input_terms(prev_emb)
        doc_steps = doc_in.unbind(1) if doc_in is not None else [None] * xp1.size(1)
        alphas = []
        for xp1_t, xq_t, doc_t in zip(xp1.unbind(1), xq.unbind(1), doc_steps):
            if states:
                tilde = self._read(torch.stack(states, dim=1), torch.stack(keys, dim=1),
                                   step_product(tilde, enc["Wqm"]) + xq_t)
            s, alpha, _ = self._transition(enc, tilde, xp1_t, doc_t)
            states.append(s)
            keys.append(self._key(enc, s))
            alphas.append(alpha)
        return torch.stack(states, dim=1), torch.stack(alphas, dim=1)

    def init_state(self, enc, beam: int = 1):
        state = super().init_state(enc, beam)
        s = state["s"]
        empty = s.new_zeros(s.size(0), 0, s.size(1))
        # mem_query: W_q s̃_{t-1}, first read at t = 2
        return state.rows(mem_states=empty, mem_keys=empty, mem_query=torch.zeros_like(s))

    def advance(self, enc, state, prev_emb_t, word_input_t):
        if state["mem_states"].size(1) == 0:
            tilde = state["s"]  # t = 1: s̃_1 = s_0
        else:
            tilde = self._read(state["mem_states"], state["mem_keys"], state["mem_query"] + self.W_x(prev_emb_t))
        s, alpha, c = self._transition(enc, tilde, word_input_t, self.document.input_terms(prev_emb_t))
        return s, alpha, c, State().rows(s=s, mem_states=torch.cat([state["mem_states"], s.unsqueeze(1)], dim=1),
                                         mem_keys=torch.cat([state["mem_keys"], self._key(enc, s).unsqueeze(1)], dim=1),
                                         mem_query=step_product(tilde, enc["Wqm"]))
