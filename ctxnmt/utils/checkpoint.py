"""Checkpoints: written atomically, loaded without executing pickled code.

A checkpoint is a plain dict of tensors and primitive values, loaded with
`torch.load(weights_only=True)`, so a file from an untrusted source cannot run
code.  It records the vocabulary fingerprints and the architecture so that a
checkpoint from another model or vocabulary is refused with a clear error.
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save

from ctxnmt.errors import CheckpointError
from ctxnmt.utils.io import atomic_write

FORMAT_VERSION = 1
# An exported model's weights (ctxnmt export): safetensors, the Hugging Face format that holds
# tensors and a string header only, so that loading it runs no code at all; the checkpoint's
# other entries (config, vocabulary fingerprints, progress) are the header's JSON.
WEIGHTS = "model.safetensors"
HEADER_KEY = "ctxnmt"


# What resuming needs and translating does not: left out of kept, averaged and exported checkpoints.
TRAINING_STATE = ("optimizer", "schedule", "rng", "rng_ranks", "precision", "window", "stream_state")


def weights_only(payload: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in payload.items() if key not in TRAINING_STATE}


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, **payload}, buffer)
    with atomic_write(path, "wb") as fh:
        fh.write(buffer.getbuffer())


def save_weights(path: str | Path, payload: dict[str, Any]) -> None:
    """A checkpoint without training state as safetensors: the parameters as tensors (each its
    own contiguous copy: safetensors refuses tensors that share memory), the rest as JSON."""
    tensors = {name: tensor.detach().clone().contiguous() for name, tensor in payload["model"].items()}
    header = {HEADER_KEY: json.dumps({k: v for k, v in payload.items() if k != "model"}, sort_keys=True)}
    with atomic_write(path, "wb") as fh:
        fh.write(save(tensors, metadata=header))


def _load_weights(path: Path, tensors: bool = True) -> dict[str, Any]:
    """A weights file as a checkpoint; without `tensors`, its header's entries alone."""
    try:
        with safe_open(path, framework="pt") as fh:
            rest = json.loads((fh.metadata() or {})[HEADER_KEY])
            if tensors:
                rest["model"] = {name: fh.get_tensor(name) for name in fh.keys()}
    except (SafetensorError, OSError, ValueError, KeyError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: corrupt, truncated or not a ctxnmt weights file ({reason[:120]})") from None
    return rest


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.suffix == ".safetensors":
        payload = _load_weights(path)
        return _checked(payload, path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for truncated or foreign files
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: corrupt, truncated or not a ctxnmt checkpoint ({reason[:120]})") from None
    return _checked(payload, path)


def _checked(payload: Any, path: Path) -> dict[str, Any]:
    if not isinstance(payload, dict) or payload.get("format_version") != FORMAT_VERSION or "model" not in payload:
        raise CheckpointError(f"{path}: not a ctxnmt checkpoint (format version {FORMAT_VERSION} expected)")
    return payload


def checkpoint_record(path: Path) -> dict[str, Any]:
    """A checkpoint's entries other than the parameters and the optimizer's state, read
    without loading either into memory (memory-mapped; a weights file's JSON header)."""
    if path.suffix == ".safetensors":
        return _load_weights(path, tensors=False)
    payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return {k: v for k, v in payload.items() if k not in ("model", "optimizer")}


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


def checkpoint_file(model_dir: str | Path, given: str) -> Path:
    """What `--checkpoint` names, for every command alike: best or last, that checkpoint of the
    model directory; anything else (those two too, where the directory has none) a file."""
    named = Path(model_dir) / "checkpoints" / f"{given}.pt"
    if given in ("best", "last") and named.is_file():
        return named
    if Path(given).is_file():
        return Path(given)
    what = f"no {named} and no file '{given}'" if given in ("best", "last") else "no such file"
    raise CheckpointError(f"--checkpoint {given}: {what} (give best, last or a checkpoint file)")


def default_checkpoint(model_dir: Path) -> Path:
    """The checkpoint a model directory is translated with unless one is named: best.pt, else
    last.pt, else (an exported model's directory) its weights file."""
    for path in (model_dir / "checkpoints" / "best.pt", model_dir / "checkpoints" / "last.pt", model_dir / WEIGHTS):
        if path.is_file():
            return path
    raise CheckpointError(f"{model_dir}: no checkpoint in {model_dir / 'checkpoints'} and no {WEIGHTS}")
