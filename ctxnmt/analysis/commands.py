"""`ctxnmt analyze WHAT ...`: one sub-command per analysis.

Each analysis module exposes ``register(subparsers)``, as the top-level command
families do; this module only gathers them under `analyze`.
"""
from __future__ import annotations

import importlib

from ctxnmt.analysis import contrastive

ANALYSIS_MODULES = (
    "ctxnmt.analysis.target_attention",
    "ctxnmt.analysis.gates",
    "ctxnmt.analysis.curves",
    "ctxnmt.analysis.alignment",
    "ctxnmt.analysis.context",
    "ctxnmt.analysis.cxmi",
)


def register(sub) -> None:
    p = sub.add_parser("analyze", help="analyse a trained model (attention, trees, gates, alignment, document context, CXMI)",
                       description="Analyses of trained models: what the target-side attention attends to and the "
                                   "trees it induces, the adaptive gates, attention as word alignment, the use of "
                                   "document context, and learning curves (docs/analysis.md).")
    inner = p.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    for name in ANALYSIS_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name and (name == err.name or name.startswith(err.name + ".")):  # an analysis not written yet
                continue
            raise
        module.register(inner)


def extend(commands: dict) -> None:
    """`score contrastive`: scoring with a model belongs to the analyses, above decoding."""
    contrastive.register(commands["score"])
