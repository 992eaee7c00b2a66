"""Checkpoints: written atomically, loaded without executing pickled code.

A checkpoint is a plain dict of tensors and primitive values, loaded with
`torch.load(weights_only=True)`, so a file from an untrusted source cannot run
code.  It records the vocabulary fingerprints and the architecture so that a
checkpoint from another model or vocabulary is refused with a clear error.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from ctxnmt.errors import CheckpointError
from ctxnmt.utils.io import atomic_write

FORMAT_VERSION = 1
def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, **payload}, buffer)
    with atomic_write(path, "wb") as fh:
        fh.write(buffer.getbuffer())


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for truncated or foreign files
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: corrupt, truncated or not a ctxnmt checkpoint ({reason[:120]})") from None
    if not isinstance(payload, dict) or payload.get("format_version") != FORMAT_VERSION or "model" not in payload:
        raise CheckpointError(f"{path}: not a ctxnmt checkpoint (format version {FORMAT_VERSION} expected)")
    return payload


def check_compatible(payload: dict[str, Any], path: str | Path, model_cfg: dict, src_fp: str, tgt_fp: str) -> None:
    """Refuse a checkpoint trained with another architecture or vocabulary."""
    if payload.get("src_vocab") != src_fp or payload.get("tgt_vocab") != tgt_fp:
        raise CheckpointError(f"{path}: was trained with a different vocabulary than this model directory's")
    saved = payload.get("model_config", {})
    diffs = [k for k in model_cfg if k in saved and saved[k] != model_cfg[k] and not k.startswith("dropout")]
    if diffs:
        k = diffs[0]
        raise CheckpointError(f"{path}: model.{k} is {saved[k]!r} in the checkpoint but {model_cfg[k]!r} in the config")


def load_model_state(model: torch.nn.Module, payload: dict[str, Any], path: str | Path) -> None:
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as err:
        first = str(err).splitlines()[0]
        raise CheckpointError(f"{path}: parameters do not fit this model ({first[:160]})") from None


def default_checkpoint(model_dir: Path) -> Path:
    """The checkpoint a model directory is translated with unless one is named: best.pt, else last.pt."""
    for name in ("best.pt", "last.pt"):
        path = model_dir / "checkpoints" / name
        if path.is_file():
            return path
    raise CheckpointError(f"{model_dir}: no checkpoint in {model_dir / 'checkpoints'}")
