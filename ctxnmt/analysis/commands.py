"""`ctxnmt analyze WHAT ...`: one sub-command per analysis.

Each analysis module exposes ``register(subparsers)``, as the top-level command
families do; this module only gathers them under `analyze`.
"""
from __future__ import annotations

from ctxnmt.analysis import alignment, context, contrastive, curves, cxmi, gates, target_attention

ANALYSES = (target_attention, gates, curves, alignment, context, cxmi)  # in the order of --help


def register(sub) -> None:
    p = sub.add_parser("analyze",
                       description="Analyses of trained models: what the target-side attention attends to and the "
                                   "trees it induces, the adaptive gates, attention as word alignment, the use of "
                                   "document context, and learning curves (docs/analysis.md).")
    inner = p.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    for module in ANALYSES:
        module.register(inner)


def extend(commands: dict) -> None:
    """`score contrastive`: scoring with a model belongs to the analyses, above decoding."""
    contrastive.register(commands["score"])
