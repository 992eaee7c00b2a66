"""Which dev metric early stopping, the schedule and best.pt follow."""
from __future__ import annotations

import re

from ctxnmt.config import load_config
from ctxnmt.training.trainer import Trainer
from ctxnmt.tasks.translation import TranslationTask
from tests.training.conftest import tiny_config


def test_without_dev_bleu_the_best_checkpoint_is_the_lowest_perplexity(tiny_corpus, tmp_path):
    """early_stop_metric defaults to bleu; with valid_bleu false the trainer once fell back
    to perplexity while still taking the highest value as the best."""
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "model")
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("early_stop_metric: ppl, ", ""), encoding="utf-8")
    config = load_config(cfg, ["training.max_epochs=0", "training.max_updates=30", "training.valid_every=5",
                               "training.lr=0.01"])
    assert config.training.early_stop_metric == "bleu" and config.training.selection_metric == "ppl"
    progress = Trainer(TranslationTask(config), quiet=True).train()
    log = (tmp_path / "model" / "train.log").read_text(encoding="utf-8")
    ppls = [float(v) for v in re.findall(r"validation at update \d+ .*: ppl ([0-9.]+)", log)]
    assert len(ppls) == 6 and min(ppls) < max(ppls)
    assert round(progress.best_metric, 2) == min(ppls)
    assert "best dev ppl" in log


def test_the_floor_rule_stops_at_the_decay_that_reaches_min_lr():
    from ctxnmt.training.optim import PlateauSchedule, plateau_stop

    # 2e-3 halved 7 times is 1.56e-5, above the floor; the 8th halving reaches it.
    schedule = PlateauSchedule(2e-3, 0, 0.5, 1, 1e-5, higher_is_better=False)
    schedule.observe(30.0)
    reasons = []
    for k in range(1, 9):
        schedule.observe(30.0 + k)
        reasons.append(plateau_stop(schedule, 0, True, "perplexity"))
        assert plateau_stop(schedule, 0, False, "perplexity") == ""
    assert reasons == [""] * 7 + ["the learning rate decayed to min_lr (1e-05)"]
    assert plateau_stop(schedule, 8, True, "perplexity") == "no improvement of dev perplexity in 8 validations"
    # Started at the floor, or never decaying: the rule never fires.
    assert not PlateauSchedule(1e-5, 0, 0.5, 1, 1e-5, False).at_floor
    constant = PlateauSchedule(2e-3, 0, 1.0, 1, 1e-5, False)
    for value in range(10):
        constant.observe(value)
    assert not constant.at_floor


def test_translation_training_stops_when_the_learning_rate_reaches_its_floor(tiny_corpus, tmp_path, monkeypatch):
    """Dev perplexity made to worsen at every validation: lr 0.01 → 0.005 → 0.0025 ≤ min_lr."""
    from ctxnmt.tasks import translation

    worsening = iter(range(10, 100))
    monkeypatch.setattr(translation, "validate", lambda *args: {"ppl": float(next(worsening))})
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "model")
    config = load_config(cfg, ["training.max_epochs=0", "training.max_updates=100", "training.valid_every=2",
                               "training.lr=0.01", "training.min_lr=0.003", "training.lr_patience=1",
                               "training.patience=0", "training.stop_at_min_lr=true"])
    progress = Trainer(TranslationTask(config), quiet=True).train()
    assert progress.update == 6 and progress.stopped == "the learning rate decayed to min_lr (0.003)"
