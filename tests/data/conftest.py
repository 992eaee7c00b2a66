"""The text pipeline as `ctxnmt prepare` learns it, for tests of what it does."""
from __future__ import annotations

from pathlib import Path

from ctxnmt.data import stream
from ctxnmt.data.preprocess import Preprocessor, make_options


def learned_pipeline(directory: Path, src: list[str], tgt: list[str], **options) -> Preprocessor:
    """The pipeline that ctxnmt.data.stream learns on these training lines, with `options` (the
    data settings preprocess.json records, no BPE unless asked: a ConfigError as preprocess.json would
    give for a bad one)."""
    options = make_options({"bpe_merges": 0, **options})
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, lines in (("train.src", src), ("train.tgt", tgt)):
        (directory / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        paths.append(str(directory / name))
    learned = stream.prepare_training(options, (*paths, None), directory / "train", directory / "work", None, 0,
                                      stream.Cleaning(), 1, lambda line: None)
    return Preprocessor(options, learned.truecasers, learned.codes)
