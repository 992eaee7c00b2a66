"""Cross-sentence context (Wang et al., "Exploiting cross-sentence context for NMT").

The K previous source sentences of the same document are summarised
hierarchically:

  S_k = last state of the sentence RNN over sentence k's embeddings
  D   = last state of the document RNN over S_1 … S_K   (oldest first)

and D reaches the model in combinable ways: `init-enc` (encoder initial state),
`init-dec` (s_0 = tanh(W_init mean(h) + W_D D)) and one auxiliary input of the
decoder's second transition, registered by name in DOC_INPUTS: `none`, `aux`,
`gated-aux` (the paper's gate) and `gated-aux-code` (the authors' released gate).

With no previous sentence (the first sentence of a document, or translation
without document ids) D = 0, the document RNN's initial state (`doc_start: zero`,
ours): every integration except the released code's gate then computes exactly the
sentence-level model's function.  `doc_start: null-sentence` follows the released code's data
format instead: such a sentence's history is one pseudo-sentence, the word NULL, which
its vocabulary does not hold, so here the one-word sentence of the unknown word.
"""
from __future__ import annotations


import torch
from torch import nn

from ctxnmt.data.vocab import PAD, UNK
from ctxnmt.models.cells import final_state
from ctxnmt.models.functional import mix
from ctxnmt.models.interfaces import ContextNeeds, ContextReader
from ctxnmt.models.registry import CELLS, CONTEXTS, DOC_INPUTS
from ctxnmt.models.settings import ComponentSection, DocumentSettings
from ctxnmt.models.state import State


def input_from_config(cfg: ComponentSection, hidden_dim: int, emb_dim: int, ctx_dim: int, blocks: int) -> DocumentInput:
    """How D enters the decoder ("none" without init-dec: not at all)."""
    s = cfg.settings(DocumentSettings)
    return DOC_INPUTS.get(s.doc_aux)(doc_dim=s.summary_dim, hidden_dim=hidden_dim, emb_dim=emb_dim, ctx_dim=ctx_dim,
                                     init_dec=s.doc_init_dec, blocks=blocks, gate_bias=s.doc_gate_bias)


def per_row(rows: torch.Tensor, per_sentence: torch.Tensor) -> torch.Tensor:
    """Broadcast per-sentence vectors (N, F) over rows (R, ·), R = N × hypotheses (beam)."""
    N, F = per_sentence.shape
    return per_sentence.unsqueeze(1).expand(N, rows.size(0) // N, F).reshape(-1, F)


@CONTEXTS.register("hierarchical")
class HierarchicalSummary(ContextReader):
    """D from a (B, K, L) block of context sentences: all B·K sentences go through the
    sentence RNN in one padded call, then the document RNN reads S_1 … S_K with empty
    slots masked (its state is held), so D is its state after the newest real sentence."""

    attribute = "document"

    @classmethod
    def needs(cls, cfg: ComponentSection) -> ContextNeeds:
        s = cfg.settings(DocumentSettings)
        return ContextNeeds(s.sentences, s.doc_target)

    @classmethod
    def describe(cls, cfg: ComponentSection) -> str:
        s = cfg.settings(DocumentSettings)
        words = f"reads the {s.sentences} previous source sentences of the document as context"
        return words + (", and its own translations of them" if s.doc_target else "")

    @classmethod
    def from_config(cls, cfg: ComponentSection, encoder_state_dim: int, src_vocab_size: int) -> HierarchicalSummary:
        s = cfg.settings(DocumentSettings)
        return cls(cfg.emb_dim, s.dim, cfg.cell, init_enc_dim=encoder_state_dim if s.doc_init_enc else 0,
                   history_vocab=src_vocab_size if s.doc_embeddings == "separate" else 0,
                   null_start=s.doc_start == "null-sentence", target=s.doc_target)

    def encode(self, model, src, src_mask, context, beam: int = 1) -> State:
        """D of each sentence's previous sentences (the empty context's where none are given)
        initialises the encoder (init-enc) and reaches the decoder (ctxnmt.models.decoders)."""
        emb = model.dropout_emb(model.src_emb(src))
        if context is None:
            doc = self.empty(src.size(0), emb, model.src_emb)
        else:
            doc = model.dropout_hidden(self(context.ids, context.mask, model.src_emb, model.dropout_emb))
        if self.target_rnns is not None:
            doc = torch.cat([doc, model.dropout_hidden(self.target_summary(context, model, emb))], 1)
        annotations = model.dropout_hidden(model.encoder(emb, src_mask, self.encoder_state(doc)))
        return model.decoder.prepare(annotations, src_mask, doc, beam)

    def embeddings(self) -> list[nn.Embedding]:
        return [self.history_emb] if self.history_emb is not None else []

    def __init__(self, emb_dim: int, doc_dim: int, cell: str = "gru", init_enc_dim: int = 0,
                 history_vocab: int = 0, null_start: bool = False, target: bool = False):
        super().__init__()
        self.null_start = null_start  # a sentence without history reads the pseudo-sentence [UNK]
        cell_cls = CELLS.get(cell)
        self.doc_dim = doc_dim
        self.sentence_rnn = cell_cls(emb_dim, doc_dim)
        self.document_rnn = cell_cls(doc_dim, doc_dim)
        # s-hier-to-2: the same two levels over the previous target sentences
        self.target_rnns = nn.ModuleList([cell_cls(emb_dim, doc_dim), cell_cls(doc_dim, doc_dim)]) if target else None
        out_dim = doc_dim * (2 if target else 1)
        # The released code's option: history sentences with their own embedding matrix.
        self.history_emb = nn.Embedding(history_vocab, emb_dim, padding_idx=PAD) if history_vocab else None
        # init-enc: D itself when the sizes agree (the released code); otherwise tanh(W D), bias-free so
        # that D = 0 still gives the zero state of a sentence-level encoder.
        self.to_encoder = nn.Linear(out_dim, init_enc_dim, bias=False) if init_enc_dim not in (0, out_dim) else None
        self.init_enc = bool(init_enc_dim)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, shared_emb: nn.Embedding,
                dropout: nn.Module | None = None) -> torch.Tensor:
        if self.null_start:
            ids, mask = _null_history(ids, mask)
        return self._levels(self.sentence_rnn, self.document_rnn, ids, mask, self.history_emb or shared_emb, dropout)

    def _levels(self, sentence_rnn, document_rnn, ids, mask, table: nn.Embedding, dropout) -> torch.Tensor:
        B, K, L = ids.shape
        emb = table(ids.view(B * K, L))
        if dropout is not None:
            emb = dropout(emb)
        zeros = emb.new_zeros(B * K, self.doc_dim)
        S = final_state(sentence_rnn, sentence_rnn.input_proj(emb), zeros, mask.view(B * K, L))
        present = mask.amax(-1)  # (B, K): an empty slot is no sentence
        xp = document_rnn.input_proj(S.view(B, K, self.doc_dim))
        return final_state(document_rnn, xp, zeros[:B], present)

    def target_summary(self, context, model, like: torch.Tensor) -> torch.Tensor:
        """D' of the previous target sentences; zero (the document RNN's initial state) where none
        are given."""
        if context is None or context.tgt_ids is None:
            return like.new_zeros(like.size(0), self.doc_dim)
        return self._levels(*self.target_rnns, context.tgt_ids, context.tgt_mask, model.tgt_emb, model.dropout_emb)

    def empty(self, batch: int, like: torch.Tensor, shared_emb: nn.Embedding) -> torch.Tensor:
        """D without any previous sentence: the same for every sentence, so summarised once."""
        if not self.null_start:
            return like.new_zeros(batch, self.doc_dim)
        ids = torch.full((1, 1, 1), PAD, dtype=torch.long, device=like.device)
        return self(ids, torch.zeros(1, 1, 1, device=like.device), shared_emb).expand(batch, -1).contiguous()

    def encoder_state(self, doc: torch.Tensor) -> torch.Tensor | None:
        """The encoder's initial state under init-enc, else None (the zero state)."""
        if not self.init_enc:
            return None
        return doc if self.to_encoder is None else torch.tanh(self.to_encoder(doc))


def _null_history(ids: torch.Tensor, mask: torch.Tensor):
    """(B, K, L) context blocks in which each row without a sentence holds the one-word
    pseudo-sentence [UNK] in its first slot (without a host read of which rows those are)."""
    none = mask.amax((1, 2)) == 0
    ids, mask = ids.clone(), mask.clone()
    ids[:, 0, 0] = torch.where(none, torch.full_like(ids[:, 0, 0], UNK), ids[:, 0, 0])
    mask[:, 0, 0] = torch.where(none, torch.ones_like(mask[:, 0, 0]), mask[:, 0, 0])
    return ids, mask


# -- how D reaches the cGRU decoder ---------------------------------------------------

@DOC_INPUTS.register("none")
class DocumentInput(nn.Module):
    """The decoder's interface to D.  This base adds D to no transition; with init_dec it
    adds W_D D inside s_0's tanh.  Subclasses change GRU_2's pre-activation terms:

      prepare(enc, doc)              per-sentence work (D terms, per-annotation terms),
                                     declared in the encoder side `enc` (a State)
      input_terms(prev_emb)          terms of E y_{t-1}, for all steps outside the loop
      gru2_terms(enc, xp2, hp2, …)   GRU_2's input and recurrent terms at one step
    """

    def __init__(self, doc_dim: int, hidden_dim: int, emb_dim: int, ctx_dim: int, init_dec: bool = False,
                 blocks: int = 3, **_):
        super().__init__()
        # GRU_2's pre-activation is `blocks` × hidden_dim wide: 3 for the GRU (r, z, candidate), 4 for the
        # hyper-gated cell, whose hyper-gate reads GRU_2's input too; D's terms must cover every block.
        self.transition_dim = blocks * hidden_dim
        self.init_from_document = nn.Linear(doc_dim, hidden_dim, bias=False) if init_dec else None  # W_D

    def prepare(self, enc: State, doc: torch.Tensor | None, gru2) -> None:
        if doc is not None:
            enc.rows(doc=doc)

    def initial_preactivation(self, enc: State, pre: torch.Tensor) -> torch.Tensor:
        if self.init_from_document is None:
            return pre
        return pre + self.init_from_document(enc["doc"])

    def input_terms(self, prev_emb: torch.Tensor) -> torch.Tensor | None:
        return None

    def gru2_terms(self, enc, xp2, hp2, s_prev, s1, alpha, y_term):
        return xp2, hp2


@DOC_INPUTS.register("aux")
class AuxiliaryInput(DocumentInput):
    """D is an input of GRU_2 beside c_t: its pre-activation gains W_D D, a term
    constant over t, formed once per sentence and added at every step."""

    def __init__(self, doc_dim, hidden_dim, emb_dim, ctx_dim, **kwargs):
        super().__init__(doc_dim, hidden_dim, emb_dim, ctx_dim, **kwargs)
        self.from_document = nn.Linear(doc_dim, self.transition_dim, bias=False)

    def prepare(self, enc, doc, gru2):
        enc.rows(doc=doc, doc_input=self.from_document(doc))

    def gru2_terms(self, enc, xp2, hp2, s_prev, s1, alpha, y_term):
        return xp2 + per_row(xp2, enc["doc_input"]), hp2


@DOC_INPUTS.register("gated-aux")
class GatedAuxiliaryInput(AuxiliaryInput):
    """The paper's gate (eqs. 5–6): GRU_2 gains W_D (z_t ⊙ D) with
    z_t = σ(U_z s_{t-1} + W_z E y_{t-1} + C_z c_t), and + b_z with `gate_bias` (ours:
    eq. 5 has no bias).

    W_z E y_{t-1} (+ b_z) is computed for all steps before the loop and C_z c_t as
    Σ_i α_ti (C_z h_i) from per-sentence terms; per step remain U_z s_{t-1} and the
    product with W_D."""

    def __init__(self, doc_dim, hidden_dim, emb_dim, ctx_dim, gate_bias: bool = True, **kwargs):
        super().__init__(doc_dim, hidden_dim, emb_dim, ctx_dim, **kwargs)
        self.gate_state = nn.Linear(hidden_dim, doc_dim, bias=False)  # U_z
        self.gate_word = nn.Linear(emb_dim, doc_dim, bias=gate_bias)  # W_z (b_z)
        self.gate_context = nn.Linear(ctx_dim, doc_dim, bias=False)  # C_z

    def prepare(self, enc, doc, gru2):
        enc.rows(doc=doc).positions(gate_values=self.gate_context(enc["annotations"]))

    def input_terms(self, prev_emb):
        return self.gate_word(prev_emb)

    def gate(self, enc, s_prev, alpha, y_term):
        return torch.sigmoid(self.gate_state(s_prev) + y_term + mix(alpha, enc["gate_values"]))

    def gru2_terms(self, enc, xp2, hp2, s_prev, s1, alpha, y_term):
        z = self.gate(enc, s_prev, alpha, y_term)
        return xp2 + self.from_document(z * per_row(z, enc["doc"])), hp2


@DOC_INPUTS.register("gated-aux-code")
class CodeGatedAuxiliaryInput(AuxiliaryInput):
    """The gate of the authors' released code (tuzhaopeng/LC-NMT): one gate per GRU_2
    pre-activation unit, g_t = σ(G_s s'_t + G_c c_t + G_D D + b_g), interpolating the
    current sentence's terms with D's:

      r, z pre-activations    (1 − g) ⊙ (W c_t + U s'_t) + g ⊙ W_D D + b
      candidate               tanh((1 − g) ⊙ (W c_t + r ⊙ U s'_t) + g ⊙ W_D D + b)

    With q = W c_t + b (GRU_2's input term) this is q + g ⊙ (W_D D + b − q) with the
    recurrent terms scaled by 1 − g, so the GRU arithmetic itself is unchanged.
    G_c c_t + G_D D + b_g is Σ_i α_ti (G_c h_i + G_D D + b_g): per-sentence terms."""

    def __init__(self, doc_dim, hidden_dim, emb_dim, ctx_dim, **kwargs):
        super().__init__(doc_dim, hidden_dim, emb_dim, ctx_dim, **kwargs)
        self.gate_state = nn.Linear(hidden_dim, self.transition_dim, bias=False)  # G_s, on s'_t
        self.gate_context = nn.Linear(ctx_dim, self.transition_dim, bias=False)  # G_c
        self.gate_document = nn.Linear(doc_dim, self.transition_dim)  # G_D, b_g

    def prepare(self, enc, doc, gru2):
        gate_values = self.gate_context(enc["annotations"]) + self.gate_document(doc).unsqueeze(1)
        enc.rows(doc=doc, doc_terms=self.from_document(doc) + gru2.W.bias).positions(gate_values=gate_values)

    def gate(self, enc, s1, alpha):
        return torch.sigmoid(self.gate_state(s1) + mix(alpha, enc["gate_values"]))

    def gru2_terms(self, enc, xp2, hp2, s_prev, s1, alpha, y_term):
        g = self.gate(enc, s1, alpha)
        return xp2 + g * (per_row(g, enc["doc_terms"]) - xp2), (1 - g) * hp2
