"""Which dev metric early stopping, the schedule and best.pt follow."""
from __future__ import annotations

import re

from ctxnmt.config import load_config
from ctxnmt.training.trainer import Trainer
from tests.training.conftest import tiny_config


def test_without_dev_bleu_the_best_checkpoint_is_the_lowest_perplexity(tiny_corpus, tmp_path):
    """early_stop_metric defaults to bleu; with valid_bleu false the trainer once fell back
    to perplexity while still taking the highest value as the best."""
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "model")
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("early_stop_metric: ppl, ", ""), encoding="utf-8")
    config = load_config(cfg, ["training.max_epochs=0", "training.max_updates=30", "training.valid_every=5",
                               "training.lr=0.01"])
    assert config.training.early_stop_metric == "bleu" and config.training.selection_metric == "ppl"
    progress = Trainer(config, quiet=True).train()
    log = (tmp_path / "model" / "train.log").read_text(encoding="utf-8")
    ppls = [float(v) for v in re.findall(r"validation at update \d+ .*: ppl ([0-9.]+)", log)]
    assert len(ppls) == 6 and min(ppls) < max(ppls)
    assert round(progress.best_metric, 2) == min(ppls)
    assert "best dev ppl" in log
