"""A model to hand on: what translation reads of a model directory, and nothing of training.

`ctxnmt export MODEL_DIR OUT_DIR` writes

    OUT_DIR/config.yaml          the model directory's config
    OUT_DIR/prep/vocab.src, vocab.tgt, preprocess/   vocabularies, tokenisation, truecasing, subwords
    OUT_DIR/prep/lengths.json    the training length ratios that length control reads
    OUT_DIR/model.safetensors    the weights (ctxnmt.utils.checkpoint.save_weights)

and leaves out the training pairs, dev set, optimizer state, logs and other checkpoints.
`translate`, `serve`, `score contrastive` and `analyze` read OUT_DIR as a model directory
(default_checkpoint finds the weights file) and translate exactly as the source directory.
The directory is written under a temporary name and renamed when whole.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ctxnmt.data.prepare import LENGTHS, load_length_ratios, load_pipeline
from ctxnmt.errors import CheckpointError, DataError
from ctxnmt.models.migrations import load_model_checkpoint
from ctxnmt.utils.checkpoint import WEIGHTS, default_checkpoint, save_weights, weights_only

PIPELINE = ("vocab.src", "vocab.tgt", "preprocess")


def export_model(model_dir: Path, out_dir: Path, checkpoint: Path | None = None) -> Path:
    """Write the exported form of `model_dir` (its `checkpoint`, else the one translate reads) to `out_dir`."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if not (model_dir / "config.yaml").is_file():
        raise CheckpointError(f"{model_dir}: not a model directory (no config.yaml)")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise DataError(f"{out_dir}: exists and is not an empty directory; export writes a new one")
    path = Path(checkpoint) if checkpoint else default_checkpoint(model_dir)
    payload = weights_only(load_model_checkpoint(path))
    load_pipeline(model_dir / "prep")  # a directory that cannot translate is refused before anything is written
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        _write(model_dir, tmp, payload)
        if out_dir.exists():
            out_dir.rmdir()
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir / WEIGHTS


def _write(model_dir: Path, out: Path, payload: dict) -> None:
    shutil.copyfile(model_dir / "config.yaml", out / "config.yaml")
    prep = out / "prep"
    prep.mkdir()
    for name in PIPELINE:
        source = model_dir / "prep" / name
        if source.is_dir():
            shutil.copytree(source, prep / name)
        else:
            shutil.copyfile(source, prep / name)
    ratios = load_length_ratios(model_dir / "prep", words=True)
    if ratios is not None:
        (prep / LENGTHS).write_text(json.dumps(ratios, indent=1) + "\n", encoding="utf-8")
    save_weights(out / WEIGHTS, payload)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
