"""The declared interfaces of the model's parts: what `NMTModel`, beam search and the
analyses call on an encoder and a decoder, with the shapes they exchange.  A variant
subclasses one of them (or a component that does) and registers under a config name
(ctxnmt.models.registry); nothing else needs to know its class.

Shapes: B sentences, S source positions, T target steps, E = model.emb_dim, C the
encoder's `out_dim`; in search R = B·K rows, K hypotheses per sentence, sentence-major.

Settings belong to their component: the model builds each one with `from_config`
from the flat model config, and a component that needs a key of its own declares it
with its registry entry (`register(name, settings=…)`, docs/new-variant.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from ctxnmt.errors import ConfigError
from ctxnmt.models.cells import RecurrentCell
from ctxnmt.models.functional import step_product
from ctxnmt.models.settings import ModelConfig
from ctxnmt.models.state import State


class Recurrence(NamedTuple):
    cell: RecurrentCell
    inputs: torch.Tensor  # (B, S, G·H) the input projection W x_i
    previous: torch.Tensor  # (B, S, H) the state step i read

    def hyper_gate(self) -> torch.Tensor:
        """The hyper-gate g at each position, its mean over the hidden units (B, S)."""
        # through the step's own product, so that under int8 the gates are those the int8 search computed
        return self.cell.hyper_gate(self.inputs, step_product(self.previous, self.cell.hidden_weight())).mean(-1)


class Encoder(nn.Module):
    """Source embeddings (B, S, E) to annotations h_i (B, S, out_dim)."""

    out_dim: int  # C, the width of the annotations
    state_dim: int  # the size of the initial state h0 that `forward` accepts
    # plain words for a reader who does not know the config's names (the server's model list),
    # formatted with the model section's keys; None: it is named by its registry name
    words: str | None = None

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> Encoder:
        """This encoder as the model config asks for it (the keys it reads are its settings)."""
        raise NotImplementedError

    def forward(self, emb: torch.Tensor, mask: torch.Tensor,
                h0: torch.Tensor | None = None) -> torch.Tensor:  # pragma: no cover
        """Annotations (B, S, out_dim) of embeddings (B, S, E) under mask (B, S), 1 for real
        tokens.  h0 (B, state_dim) starts every recurrence (document context's init-enc);
        None is the zero state."""
        raise NotImplementedError

    def recurrence_cells(self) -> dict[str, RecurrentCell]:
        """The encoder's recurrences by name, each with its cell; none by default."""
        return {}

    def recurrences(self, emb: torch.Tensor, mask: torch.Tensor,
                    h0: torch.Tensor | None = None) -> dict[str, Recurrence]:
        """For each of `recurrence_cells`, its cell, input projection and the state each step
        read (from `forward`'s h0): all an analysis needs to recompute the cell's gates outside
        the time loop."""
        return {}


class Decoder(nn.Module):
    """From the encoder side and the previous target words to readout vectors t_t (…, out_dim),
    with p(y_t) = softmax(W_o t_t).  Two modes that must agree to 1e-5 (tests check it):

      forward(enc, prev_emb, tgt_mask)    teacher forcing over whole sentences
      init_state(enc, beam) / step(…)     one step at a time, as search runs it

    Both read the encoder side that `prepare` declares, and search carries the decoder
    state that `init_state` and `step` declare (ctxnmt.models.state).  A step returns a new
    state and writes into neither."""

    out_dim: int  # the width of the readout t_t
    words: str | None = None  # as Encoder.words

    @classmethod
    def from_config(cls, cfg: ModelConfig, ctx_dim: int) -> Decoder:
        """This decoder as the model config asks for it, reading annotations ctx_dim wide."""
        raise NotImplementedError

    def prepare(self, annotations: torch.Tensor, src_mask: torch.Tensor, doc: torch.Tensor | None = None,
                beam: int = 1) -> State:  # pragma: no cover
        """The encoder side, once per sentence: annotations (B, S, C), src_mask (B, S) and, for a
        document-context model, the document summary D (B, doc_dim).  `beam`: the hypotheses
        that will read each sentence at every step (1 under teacher forcing and in greedy
        search), so that terms worth forming once for them all are formed here."""
        raise NotImplementedError

    def forward(self, enc: State, prev_emb: torch.Tensor,
                tgt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover
        """Readouts (B, T, out_dim) and source attention α (B, T, S) under teacher forcing, from
        the shifted target embeddings [y_0, E y_1, …, E y_{T-1}] (B, T, E) and tgt_mask (B, T)."""
        raise NotImplementedError

    def init_state(self, enc: State, beam: int = 1) -> State:  # pragma: no cover
        """The state before the first step: B·beam rows, sentence-major."""
        raise NotImplementedError

    def step(self, enc: State, state: State, prev_emb_t: torch.Tensor,
             word_input_t: torch.Tensor) -> tuple[torch.Tensor, State, torch.Tensor]:  # pragma: no cover
        """One step for R rows: the readout (R, out_dim), the new state and α_t (R, S), from
        E y_{t-1} (R, E) and its `word_input` (R, ·)."""
        raise NotImplementedError

    def forced_step(self, enc: State, state: State, prev_emb_t: torch.Tensor, word_input_t: torch.Tensor) -> State:
        """`step`'s new state alone, for a word read but not predicted (a 2-to-2 model's target
        prefix): a decoder that can skip forming the readout does so."""
        return self.step(enc, state, prev_emb_t, word_input_t)[1]

    def word_input(self, emb: torch.Tensor) -> torch.Tensor:
        """The part of a step that depends on the previous word alone, for embeddings (…, E):
        search looks it up per word (functional.WordTable).  The embedding by default."""
        return emb

    def word_input_parameters(self) -> list[torch.Tensor]:
        """The parameters `word_input` reads: search forms its table again when they change."""
        return []

    # -- what the model can show (ctxnmt.models.capabilities) and the analyses reading it ------
    def recurrence_cells(self) -> dict[str, RecurrentCell]:
        """The decoder's recurrences by name, each with its cell; none by default."""
        return {}

    def has_target_attention(self) -> bool:
        return False

    def target_attention(self, enc: State, prev_emb: torch.Tensor, tgt_mask: torch.Tensor) -> torch.Tensor:
        """Causal weights α (B, T, T) of d_t over [y_0, …, y_{T-1}] under teacher forcing: row t-1
        holds α_t over y_0 … y_{t-1}.  Only where `has_target_attention`."""
        raise ConfigError(f"the {type(self).__name__} decoder has no attention over previous words")

    def has_adaptive_output(self) -> bool:
        return False

    def output_weights(self, enc: State, prev_emb: torch.Tensor, tgt_mask: torch.Tensor) -> torch.Tensor:
        """The adaptive output's weights α (3, B, T, out_dim) of s_t, d_t and c_t under teacher
        forcing.  Only where `has_adaptive_output`."""
        raise ConfigError(f"the {type(self).__name__} decoder has no adaptive output")

    def recording(self, state: State) -> State:
        """`state` set to record, from its next step on, what `signals` reads: search asks for it
        only where the values are wanted.  A decoder that shows nothing records nothing."""
        return state

    def recorded(self, state: State) -> State | None:
        """What the step that made a recording `state` recorded (entries (R, …)); None: nothing."""
        return None

    def signals(self, record: State) -> dict[str, torch.Tensor]:
        """What R rows showed at each of their T steps besides source attention, from each step's
        `recorded` stacked on axis 1, as the teacher-forced methods give it: `target_attention`
        (R, T, T) as `target_attention`'s, `output_weights` (R, T, 3) the mean α of s_t, d_t and c_t."""
        return {}


@dataclass(frozen=True)
class ContextNeeds:
    """What a document-context input asks of the data each batch (ctxnmt.data.batching.Context):
    the K previous source sentences, and whether their target sides too."""

    sentences: int = 0
    reads_target: bool = False


class ContextReader(nn.Module):
    """A document-context input: how the model reads the sentences before the current one.
    Each registers in CONTEXTS (`model.context`, ctxnmt.models.context) with its settings;
    the model holds it as its attribute `attribute` (its parameters' checkpoint prefix) and
    hands it the encoder side.  Shapes as above; the context is a (B, K, L) block."""

    attribute = "context_input"

    @classmethod
    def needs(cls, cfg: ModelConfig) -> ContextNeeds:
        """What a model of `cfg` reads: the data side builds every batch's context from it."""
        raise NotImplementedError

    @classmethod
    def describe(cls, cfg: ModelConfig) -> str:
        """What a model of `cfg` reads, in plain words for the server's model list ('' for none)."""
        return ""

    @classmethod
    def from_config(cls, cfg: ModelConfig, encoder_state_dim: int, src_vocab_size: int) -> ContextReader | None:
        """This input as the model config asks for it; None where it adds nothing to the model."""
        raise NotImplementedError

    @property
    def encodes_target(self) -> bool:
        """Whether `encode` may read the target side of the context (the hierarchical model's
        target summary does); an input that only forces it as a `target_prefix` says False, and
        its sentences may then be encoded before their previous translations are known
        (ctxnmt.decoding.ahead)."""
        return True

    def encode(self, model, src: torch.Tensor, src_mask: torch.Tensor, context, beam: int = 1) -> State:
        """The encoder side (model.decoder.prepare's) of the sentences `src` read with `context`
        (None: no previous sentence), from the model's embeddings, encoder and decoder."""
        raise NotImplementedError

    def target_prefix(self, model, context) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Target words the decoder is forced through before the sentence's own (B, P) with their
        mask, left-aligned, ending in the break id; None (the default) for an input without."""
        return None

    def memory_lengths(self, enc: State) -> list[int] | None:
        """Positions each sentence's attention reads where that is more than its source."""
        return None

    def own_positions(self, values: torch.Tensor, enc: State, width: int) -> torch.Tensor:
        """Values (B, W) over the positions the encoder read, at the sentence's own `width` ones."""
        return values

    def embed_target(self, table: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings of target ids, those of a `target_prefix` included."""
        return table(ids)

    def loss_on_prefix(self) -> bool:
        """Whether training scores the target prefix's words too (else the sentence's alone)."""
        return False

    def embeddings(self) -> list[nn.Embedding]:
        """Word embedding tables of its own (their padding rows are zeroed at initialisation)."""
        return []
