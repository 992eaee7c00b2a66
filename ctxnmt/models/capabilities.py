"""What a model can show besides its translations, declared by its parts.

The server's page and the analyses ask a model for its `Capabilities` instead of
looking for attributes of its encoder and decoder: a variant that declares none of
them is served and analysed as far as it goes, and refused with one line where an
analysis needs what it lacks.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    encoder_hyper_gates: tuple[str, ...] = ()  # the encoder recurrences (Encoder.recurrences) whose cell has a hyper-gate
    decoder_hyper_gates: tuple[str, ...] = ()  # the decoder's
    target_attention: bool = False  # d_t attends over the previous target words
    adaptive_output: bool = False  # the readout weighs s_t, d_t and c_t (α_s, α_y, α_c)
    document_context: bool = False  # reads the previous source sentences of its document


def hyper_gated(cells: dict) -> tuple[str, ...]:
    """The names of the recurrences (name → cells.RecurrentCell) whose cell has a hyper-gate."""
    return tuple(name for name, cell in cells.items() if cell.hyper_gated)
