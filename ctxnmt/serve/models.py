"""What GET /v1/models says about the served model(s): read once at start-up."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ctxnmt.config import ModelConfig, load_config
from ctxnmt.models.capabilities import Capabilities
from ctxnmt.models.context import context_description
from ctxnmt.models.registry import DECODERS, ENCODERS, TARGET_CONTEXTS, Registry
from ctxnmt.serve.signals import Signals
from ctxnmt.utils.checkpoint import checkpoint_record, default_checkpoint


def words(registry: Registry, name: str, default: str) -> str:
    """The plain words that the component registered as `name` declares (Encoder.words); a
    component without them (a new variant) is named by `default`, its registry name."""
    declared = registry.get(name).words if name in registry.names() else None
    return default if declared is None else declared


def describe(model: ModelConfig, capabilities: Capabilities) -> str:
    """The architecture in plain words: the encoder and decoder, then only what differs
    from RNNsearch's (target context, hyper-gated cells, adaptive output, document context)."""
    parts = [words(ENCODERS, model.encoder, f"{model.encoder} encoder").format(**model.to_dict()),
             words(DECODERS, model.decoder, f"{model.decoder} decoder"),
             words(TARGET_CONTEXTS, model.target_context, f"target context {model.target_context}")]
    gated = [side for side, names in (("encoder", capabilities.encoder_hyper_gates),
                                      ("decoder", capabilities.decoder_hyper_gates)) if names]
    if gated:
        parts.append(f"hyper-gated (adaptive) GRUs in the {' and '.join(gated)}")
    if capabilities.adaptive_output:
        parts.append("adaptive output weights")
    text = "RNNsearch: " + ", ".join(p for p in parts if p)
    document = context_description(model)
    if document:
        text += f"; {document}"
    return text


def member_info(model_dir: Path, model, translator, checkpoint: Path | None = None) -> dict:
    config = load_config(model_dir / "config.yaml")
    path = checkpoint or default_checkpoint(model_dir)
    progress = checkpoint_record(path).get("progress") or {}
    return {
        "model_dir": str(model_dir),
        "name": config.name,
        "architecture": config.to_dict()["model"],
        "description": describe(config.model, model.capabilities),
        "capabilities": dataclasses.asdict(model.capabilities),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocabularies": {"source": {"language": config.data.src_lang, "size": len(translator.src_vocab)},
                         "target": {"language": config.data.tgt_lang, "size": len(translator.tgt_vocab)}},
        "checkpoint": {"path": str(path), "update": progress.get("update"), "epoch": progress.get("epoch")},
        "dev_scores": progress.get("best_scores"),
    }


def models_info(model_dirs: list[str], translator, checkpoint: Path | None = None) -> dict:
    return {
        "ensemble": len(translator.members) > 1,
        "ensemble_mode": translator.ensemble_mode,
        "decoding": translator.config.to_dict()["decoding"],
        "signals": dataclasses.asdict(Signals.of(translator)),
        "document_sents": translator.document_sents,  # the translator's: an ensemble's, not its first member's
        "models": [member_info(Path(d), m, translator, checkpoint) for d, m in zip(model_dirs, translator.members)],
    }
