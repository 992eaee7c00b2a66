"""What GET /v1/models says about the served model(s): read once at start-up."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ctxnmt.config import load_config
from ctxnmt.utils.checkpoint import default_checkpoint
from ctxnmt.serve.signals import Signals


def member_info(model_dir: Path, model, translator) -> dict:
    config = load_config(model_dir / "config.yaml")
    path = default_checkpoint(model_dir)
    # mmap: read the progress record, not the weights and optimiser moments into memory again
    progress = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("progress") or {}
    return {
        "model_dir": str(model_dir),
        "name": config.name,
        "architecture": config.to_dict()["model"],
        "capabilities": dataclasses.asdict(model.capabilities),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocabularies": {"source": {"language": config.data.src_lang, "size": len(translator.src_vocab)},
                         "target": {"language": config.data.tgt_lang, "size": len(translator.tgt_vocab)}},
        "checkpoint": {"path": str(path), "update": progress.get("update"), "epoch": progress.get("epoch")},
        "dev_scores": progress.get("best_scores"),
    }


def models_info(model_dirs: list[str], translator) -> dict:
    return {
        "ensemble": len(translator.members) > 1,
        "ensemble_mode": translator.ensemble_mode,
        "decoding": translator.config.to_dict()["decoding"],
        "signals": dataclasses.asdict(Signals.of(translator)),
        "document_sents": translator.document_sents,  # the translator's: an ensemble's, not its first member's
        "models": [member_info(Path(d), m, translator) for d, m in zip(model_dirs, translator.members)],
    }
