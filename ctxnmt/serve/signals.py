"""What a model attends to, per translated sentence, as JSON-ready lists: the values the
web page draws.  Source attention comes from beam search itself; target-side attention
and the adaptive gates are recomputed with the model forced to produce its own output
(ctxnmt.analysis), and exist only for single models whose capabilities declare them
(ctxnmt.models.capabilities; an ensemble declares none).

Known limit: the forced passes read the sentence alone, so for a model that also reads
document context the target-side attention and gates are those without the context.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ctxnmt.analysis.forced import target_attention
from ctxnmt.analysis.gates import OUTPUT_WEIGHTS, encoder_gates, output_weights
from ctxnmt.data.vocab import EOS

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


def rounded(values: torch.Tensor) -> list:
    return torch.round(values.double(), decimals=DIGITS).tolist()


def attention_values(translator, signals: Signals, translations: list) -> list[dict]:
    """For each translation: its subwords, source attention and, where the model has them,
    target-side attention and gate values.  Empty inputs get empty lists."""
    out = [{"src_tokens": t.src_tokens, "tokens": t.tokens,
            "attention": rounded(t.attention) if t.attention is not None else None,
            "target_attention": None, "gates": None} for t in translations]
    todo = [k for k, t in enumerate(translations) if t.src_tokens]
    if not todo or not (signals.target_attention or signals.encoder_gates or signals.output_gates):
        return out
    model = translator.model
    src = [translator.src_vocab.encode(translations[k].src_tokens, add_eos=False) for k in todo]
    tgt = [translator.tgt_vocab.encode(translations[k].tokens, add_eos=False) for k in todo]
    if signals.target_attention:
        for k, alpha in zip(todo, target_attention(model, src, [ids + [EOS] for ids in tgt])):
            out[k]["target_attention"] = rounded(alpha)
    if signals.encoder_gates or signals.output_gates:
        encoder = encoder_gates(model, src) if signals.encoder_gates else {}
        output = output_weights(model, src, tgt) if signals.output_gates else None
        for n, k in enumerate(todo):
            out[k]["gates"] = {
                "encoder": {name: rounded(values[n]) for name, values in encoder.items()},
                "output": {name: rounded(output[n][:, j]) for j, name in enumerate(OUTPUT_WEIGHTS)}
                if output is not None else {},
            }
    return out
