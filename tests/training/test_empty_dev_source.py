"""A dev set with an empty source line: validation decodes it as an empty translation and
leaves it out of perplexity, so training validates with finite scores instead of
crashing or selecting checkpoints on NaN."""
from __future__ import annotations

import math
import shutil

import pytest

from ctxnmt.config import load_config
from ctxnmt.training.trainer import Trainer
from ctxnmt.tasks.translation import TranslationTask
from ctxnmt.tasks.translation import validate
from tests.training.conftest import tiny_config


@pytest.fixture
def dev_with_an_empty_source(tiny_corpus, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_corpus, data)
    src = (data / "dev.es").read_text(encoding="utf-8").splitlines()
    src[5] = ""  # its reference stays: a pair kept in dev, which encode_split does not filter
    (data / "dev.es").write_text("\n".join(src) + "\n", encoding="utf-8")
    return data


@pytest.mark.parametrize("beam", [1, 3])
def test_validation_with_an_empty_dev_source_is_finite(dev_with_an_empty_source, tmp_path, beam):
    cfg = tiny_config(tmp_path / "tiny.yaml", dev_with_an_empty_source, tmp_path / "model")
    config = load_config(cfg, ["training.max_epochs=0", "training.max_updates=2", "training.valid_every=2",
                               "training.valid_bleu=true", f"training.valid_beam={beam}",
                               "training.early_stop_metric=bleu"])
    trainer = Trainer(TranslationTask(config), quiet=True)
    assert trainer.task.data.dev.src[5] == [] and len(trainer.task.data.dev.src) == 12
    progress = trainer.train()
    assert progress.update == 2 and math.isfinite(progress.best_metric)
    scores = validate(trainer.model, trainer.task.data, config, "cpu")
    assert math.isfinite(scores["ppl"]) and math.isfinite(scores["bleu"])
