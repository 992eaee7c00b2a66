"""Checkpoint averaging: the weights kept at the last writes of a training, and their mean.

`training.keep_checkpoints: N` keeps, besides best.pt and last.pt, the weights of each of the
last N scheduled writes of last.pt (validations and `checkpoint_every`) as
`checkpoints/update-U.pt`: the model's parameters and what loading them checks (config,
vocabularies), none of the optimizer's state, so N of them cost N models' size, not 3 N.
`ctxnmt average` writes the element-wise mean of such checkpoints (fairseq's
average_checkpoints semantics: every parameter averaged with equal weight) as one more
checkpoint that `translate`, `serve`, `score` and `analyze` take with `--checkpoint`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from ctxnmt.errors import CheckpointError
from ctxnmt.models.migrations import load_model_checkpoint, save_model_checkpoint
from ctxnmt.utils.checkpoint import weights_only

KEPT = re.compile(r"update-(\d+)\.pt")
# What must be the same in every averaged checkpoint: the mean of two models of other vocabularies
# or architectures is no model.
SAME_MODEL = ("src_vocab", "tgt_vocab", "vocab", "model_config")


def kept_name(update: int) -> str:
    return f"update-{update}.pt"


def kept_checkpoints(ckpt_dir: Path) -> list[Path]:
    """The kept checkpoints of a directory, oldest first (by update, not by name)."""
    found = [(int(m.group(1)), path) for path in ckpt_dir.glob("update-*.pt") if (m := KEPT.fullmatch(path.name))]
    return [path for _, path in sorted(found)]


def prune_kept(ckpt_dir: Path, keep: int) -> None:
    """Remove all but the last `keep` kept checkpoints."""
    for path in kept_checkpoints(ckpt_dir)[:-keep]:
        path.unlink(missing_ok=True)


def last_kept(model_dir: Path, n: int) -> list[Path]:
    """The last `n` kept checkpoints of a model directory; an error where it kept fewer."""
    kept = kept_checkpoints(Path(model_dir) / "checkpoints")
    if len(kept) < n:
        raise CheckpointError(f"{model_dir}: {len(kept)} kept checkpoint(s) in {Path(model_dir) / 'checkpoints'}, "
                              f"{n} asked for (train with training.keep_checkpoints: {n} or more)")
    return kept[-n:]


def average(paths: list[Path]) -> dict[str, Any]:
    """The element-wise mean of the checkpoints `paths`' parameters (summed in float64, stored
    in each parameter's own type), with the last one's config and progress."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    payloads = [load_model_checkpoint(path) for path in paths]
    first = payloads[0]
    for path, payload in zip(paths[1:], payloads[1:]):
        _check_same_model(first, payload, paths[0], path)
    mean = {}
    for name, tensor in first["model"].items():
        if tensor.is_floating_point():
            total = sum(p["model"][name].double() for p in payloads)
            mean[name] = (total / len(payloads)).to(tensor.dtype)
        else:  # counters and indices are no quantities to average: they must agree
            for path, payload in zip(paths[1:], payloads[1:]):
                if not torch.equal(payload["model"][name], tensor):
                    raise CheckpointError(f"{path}: {name} differs from {paths[0]}'s and cannot be averaged")
            mean[name] = tensor.clone()
    return {**weights_only(payloads[-1]), "model": mean, "averaged": [str(path) for path in paths]}


def _check_same_model(a: dict[str, Any], b: dict[str, Any], path_a: Path, path_b: Path) -> None:
    for key in SAME_MODEL:
        if a.get(key) != b.get(key):
            raise CheckpointError(f"{path_b}: {key} differs from {path_a}'s; only checkpoints of one model average")
    if a["model"].keys() != b["model"].keys():
        raise CheckpointError(f"{path_b}: holds other parameters than {path_a}")
    for name, tensor in a["model"].items():
        if b["model"][name].shape != tensor.shape:
            raise CheckpointError(f"{path_b}: {name} has shape {tuple(b['model'][name].shape)}, "
                                  f"{tuple(tensor.shape)} in {path_a}")


def write_average(paths: list[Path], out: Path) -> dict[str, Any]:
    """Average `paths` into the checkpoint file `out` (written whole or not at all)."""
    averaged = average(paths)
    save_model_checkpoint(out, averaged)
    return averaged
