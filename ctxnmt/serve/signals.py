"""What a model attends to, per translated sentence, as JSON-ready lists: the values the
web page draws.  All come from the translation's own search (Searchable.signals), so a
document-context model's are those it translated with, its context read; target-side
attention and the adaptive gates exist only for single models whose capabilities declare
them (ctxnmt.models.capabilities; an ensemble declares none).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ctxnmt.models.output import OUTPUT_WEIGHTS

DIGITS = 4  # enough to draw and to compare; keeps the answers small


@dataclass(frozen=True)
class Signals:
    """Which values this model has."""
    target_attention: bool
    encoder_gates: bool
    output_gates: bool
    document_context: bool

    @classmethod
    def of(cls, translator) -> Signals:
        capabilities = translator.model.capabilities
        return cls(
            target_attention=capabilities.target_attention,
            encoder_gates=bool(capabilities.encoder_hyper_gates),
            output_gates=capabilities.adaptive_output,
            # the translator's rule, not the config's: an ensemble's config is its first member's,
            # and the ensemble reads context when any member does
            document_context=bool(translator.document_sents),
        )


def rounded(values: torch.Tensor | None) -> list | None:
    return None if values is None else torch.round(values.double(), decimals=DIGITS).tolist()


def attention_values(signals: Signals, translations: list) -> list[dict]:
    """For each translation: its subwords, source attention and, where the model has them,
    target-side attention and gate values (None for an empty input)."""
    return [{"src_tokens": t.src_tokens, "tokens": t.tokens, "attention": rounded(t.attention),
             "target_attention": rounded(t.signals.get("target_attention")) if signals.target_attention else None,
             "gates": _gates(t.signals) if t.signals and (signals.encoder_gates or signals.output_gates) else None}
            for t in translations]


def _gates(shown: dict) -> dict:
    output = shown.get("output_weights")
    return {"encoder": {name: rounded(values) for name, values in shown.get("encoder_gates", {}).items()},
            "output": {} if output is None else {name: rounded(output[:, j]) for j, name in enumerate(OUTPUT_WEIGHTS)}}
