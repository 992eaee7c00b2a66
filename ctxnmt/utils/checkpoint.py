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

from ctxnmt.errors import CheckpointError
from ctxnmt.utils.io import atomic_write

FORMAT_VERSION = 1
# Bumped when a registered name comes to compute something else.  2: `mean` became the
# paper's eq. 9 (the old computation is `mean-with-start`), `adaptive` the paper's K = 1
# output (the old one is `adaptive-gain3`), and the memory-RNN follows eq. 17 and appendix
# A.3.2 (its old form is gone).  3: the language model's `mean` summary followed (eq. 11).
# 4: the memory-RNN's memory holds s_1 … s_{t-1}, as eq. 15 sums (s_0 was in it).  5: the
# gated-aux gate's bias b_z became a key, `doc_gate_bias` (eq. 5 has none), and so did the
# history of a document's first sentence, `doc_start` (the released code's NULL sentence);
# before, the gate had a bias and that history summary was zero.  6: the language model's
# `self-attentive` summary followed eqs. 12–13, its start symbol left out (the old computation
# is `self-attentive-with-start`).
DEFINITIONS = 6
# (model config key, old value): (the name of the old computation, the definitions that changed it)
RENAMED = {("target_context", "mean"): ("mean-with-start", 2), ("output", "adaptive"): ("adaptive-gain3", 2),
           ("summary", "mean"): ("mean-with-start", 3), ("summary", "self-attentive"): ("self-attentive-with-start", 6)}
RETIRED = {("decoder", "memory-rnn"): ("the memory-RNN before it followed eqs. 15 and 17 (ctxnmt before definitions 4)",
                                      4)}


def _gated(model_config: dict) -> bool:
    return model_config.get("doc_aux") == "gated-aux"


def _document(model_config: dict) -> bool:
    # ModelConfig.uses_document on a saved dict: utils sits below config and cannot import it
    return bool(model_config.get("doc_init_enc") or model_config.get("doc_init_dec")
                or model_config.get("doc_aux", "none") != "none")


# Keys a checkpoint of its kind did not record yet: (of which checkpoints, key, the value they computed with,
# the definitions that added the key)
UNRECORDED = [(_gated, "doc_gate_bias", True, 5), (_document, "doc_start", "zero", 5)]


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, "definitions": DEFINITIONS, **payload}, buffer)
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
    _upgrade_definitions(payload, path)
    return payload


def _upgrade_definitions(payload: dict[str, Any], path: Path) -> None:
    """Rename, in the loaded payload, a value whose name has since come to mean another
    computation, so that the checkpoint states what it was trained with; a model directory
    whose config.yaml still has the old name is then refused by check_compatible, naming
    the key and the value to set."""
    written = payload.get("definitions", 1)
    if written >= DEFINITIONS:
        return
    upgrade_model_config(payload.setdefault("model_config", {}), written, path)
    payload["definitions"] = DEFINITIONS


def upgrade_model_config(saved: dict[str, Any], written: int, where: str | Path) -> None:
    """A model config written under definitions `written`, restated in today's names (in
    place): a value since renamed gets its new name, a key added since gets the value the
    run computed with; a computation that no longer exists is a CheckpointError naming `where`."""
    for (key, old), (what, changed_in) in RETIRED.items():
        if written < changed_in and saved.get(key) == old:
            raise CheckpointError(f"{where}: trained with {what}, which no longer exists; retrain it")
    for (key, old), (new, changed_in) in RENAMED.items():
        if written < changed_in and saved.get(key) == old:
            saved[key] = new
    for applies, added, then, added_in in UNRECORDED:
        if written < added_in and applies(saved):
            saved.setdefault(added, then)


def directory_definitions(model_dir: Path, record: str) -> int | None:
    """The definitions a run directory was trained under: as its finished record (`record`,
    e.g. done.json) states them, else as its checkpoints do; None where neither tells (a
    copy without checkpoints made before records kept them)."""
    try:
        stated = json.loads((model_dir / record).read_text(encoding="utf-8")).get("definitions")
    except (OSError, ValueError, AttributeError):
        stated = None
    if isinstance(stated, int) and not isinstance(stated, bool):
        return stated
    for name in ("best.pt", "last.pt"):
        path = model_dir / "checkpoints" / name
        try:  # mmap: only the few bytes of the header are read, not the weights
            payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception:  # missing or corrupt: the other one may tell (the commands that load it say why not)
            continue
        if isinstance(payload, dict):
            return payload.get("definitions", 1)
    return None


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
