"""What search asks of a model, declared: `Searchable` is all that beam search
(ctxnmt.decoding.beam) and ensembles call, and `TranslationModel` adds what the
translator's users (the server, the analyses) ask besides.  `NMTModel` and `Ensemble`
provide both; so may any other model, without subclassing anything.

Shapes: B sentences, S source positions, K hypotheses per sentence, R = B·K rows
(sentence-major), V the target vocabulary.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from ctxnmt.data.batching import Context
from ctxnmt.models.capabilities import Capabilities
from ctxnmt.models.state import State


@runtime_checkable
class Searchable(Protocol):
    @property
    def vocab_size(self) -> int:
        """V."""

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor, context: Context | None = None,
               beam: int = 1, signals: bool = False, ahead: State | None = None) -> State:
        """The encoder side (B rows) of a padded batch (B, S): one row per sentence, shared by its
        `beam` hypotheses.  `context`: each sentence's previous source sentences (None: none
        given); a model without document context ignores it.  `signals`: `signals` will be asked.
        `ahead` (passed only where given): these rows of an earlier `encode` of the same sentences
        with the source side of the same context (ctxnmt.decoding.ahead); the model adds what the
        rest of `context` adds (a 2-to-2 model's target prefix) instead of encoding again."""

    @property
    def encoding_reads_target(self) -> bool:
        """Whether `encode` reads the target side of the context (a hierarchical target summary);
        where it does not, search may encode sentences before their previous translations are
        known and give `encode` their rows as `ahead`."""

    def memory_lengths(self, enc: State) -> list[int] | None:
        """Where each sentence's memory ends: the positions up to its last annotation (its own
        source positions, padded to the batch's, then the context a concatenation model joined to
        it); None where the memory is the source.  Search never trims the encoder side below it."""

    def init_state(self, enc: State, beam: int = 1) -> State:
        """The decoder state before the first step, B·beam rows."""

    def step(self, enc: State, state: State,
             prev_tokens: torch.Tensor | None) -> tuple[torch.Tensor, State, torch.Tensor]:
        """Log-probabilities (R, V) of the next word, the new state and the source attention
        α_t (R, S); prev_tokens (R,) are the words just chosen, None at the first step."""

    def step_candidates(self, enc: State, state: State, prev_tokens: torch.Tensor | None,
                        k: int) -> tuple[torch.Tensor, torch.Tensor, State, torch.Tensor]:
        """As `step`, but only each row's k most probable next words: their log-probabilities
        and ids (R, k), best first."""

    def step_candidates_with_end(self, enc: State, state: State, prev_tokens: torch.Tensor | None,
                                 k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, State, torch.Tensor]:
        """As `step_candidates`, and each row's log-probability of </s> (R,), whatever its rank:
        what a length-ratio prior reads of every row, without the (R, V) distribution where the
        model can give it otherwise."""

    def recorded(self, state: State) -> State | None:
        """What the step that made `state` recorded of each row for `signals`, entries (R, …) of a
        steady shape; None where the encoder side asked for none or the model shows nothing."""

    def signals(self, enc: State, record: State | None, rows: torch.Tensor, beam: int) -> list[dict]:
        """For each of the rows `rows` (`beam` per sentence of `enc`) of `record` (every step's
        `recorded`, stacked on axis 1 and reordered with the beams): what it showed besides source
        attention, by name (ctxnmt.models.nmt.NMTModel.signals)."""


@runtime_checkable
class TranslationModel(Searchable, Protocol):
    @property
    def capabilities(self) -> Capabilities:
        """What it can show besides its translations (ctxnmt.models.capabilities)."""
