"""The model definitions a checkpoint is stamped with, and how a model config written under
older ones is restated in today's names: `save_model_checkpoint` and `load_model_checkpoint`
are ctxnmt.utils.checkpoint's file format with the models' definitions around it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ctxnmt.config import LANGUAGE_MODEL, TRANSLATION
from ctxnmt.errors import CheckpointError
from ctxnmt.models.document import DocumentSettings
from ctxnmt.utils.checkpoint import load_checkpoint, save_checkpoint

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


def _document(model_config: dict) -> bool:
    keys = ("doc_init_enc", "doc_init_dec", "doc_aux")
    return DocumentSettings(**{key: model_config[key] for key in keys if key in model_config}).reads_document


# Keys a checkpoint of its kind did not record yet: (of which checkpoints, key, the value they computed with,
# the definitions that added the key)
UNRECORDED = [(lambda saved: saved.get("doc_aux") == "gated-aux", "doc_gate_bias", True, 5),
              (_document, "doc_start", "zero", 5)]


def saved_task(raw: dict[str, Any]) -> str:
    """The task (ctxnmt.tasks) a model directory's saved config.yaml names by its `task:` key.  A
    directory saved before configs had the key is told by what only a language model's saved config
    holds, training.bptt: the one place that reads an old directory's task from its other keys."""
    if "task" in raw:
        return raw["task"]
    training = raw.get("training")
    return LANGUAGE_MODEL if isinstance(training, dict) and "bptt" in training else TRANSLATION


def save_model_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    save_checkpoint(path, {"definitions": DEFINITIONS, **payload})


def load_model_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint as `load_checkpoint` reads it, restated under today's definitions."""
    payload = load_checkpoint(path)
    upgrade_payload(payload, Path(path))
    return payload


def upgrade_payload(payload: dict[str, Any], path: Path) -> None:
    """A loaded checkpoint restated in today's names, so that a model directory whose config.yaml
    has an old name is refused by check_compatible, naming the key and the value to set."""
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

