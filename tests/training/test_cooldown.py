"""The optional cool-down: the last `cooldown_updates` of a fixed budget take the learning
rate linearly to zero (used by the demo, whose budget is fixed in advance)."""
from __future__ import annotations

import re

import pytest

from ctxnmt.config import ConfigError, load_config
from ctxnmt.training.optim import PlateauSchedule
from ctxnmt.training.trainer import Trainer
from ctxnmt.tasks.translation import TranslationTask
from tests.training.conftest import tiny_config


def test_the_last_updates_fall_linearly_to_zero():
    schedule = PlateauSchedule(1e-3, 0, 0.5, 1, 1e-5, True, total=10, cooldown=4)
    rates = [schedule.lr(u) for u in range(10)]
    assert rates == pytest.approx([1e-3] * 7 + [0.75e-3, 0.5e-3, 0.25e-3])
    # with warm-up and a plateau decay the factors multiply
    schedule = PlateauSchedule(1e-3, 4, 0.5, 1, 1e-5, True, scale=0.5, total=8, cooldown=2)
    assert schedule.lr(0) == pytest.approx(1e-3 * 0.5 * 0.25)
    assert schedule.lr(7) == pytest.approx(1e-3 * 0.5 * 0.5)
    # off by default
    assert PlateauSchedule(1e-3, 0, 0.5, 1, 1e-5, True).lr(10**6) == 1e-3


def test_training_ends_at_the_cool_down_rate_and_resume_takes_the_budget_from_the_config(tiny_corpus, tmp_path):
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "model")
    config = load_config(cfg, ["training.max_epochs=0", "training.max_updates=6", "training.cooldown_updates=3",
                               "training.valid_every=3"])
    trainer = Trainer(TranslationTask(config), quiet=True)
    progress = trainer.train()
    assert progress.update == 6
    # the sixth update (update index 5) ran at 1/3 of lr 0.003
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.001)
    assert "total" not in trainer.schedule.state_dict()
    longer = load_config(cfg, ["training.max_epochs=0", "training.max_updates=12", "training.cooldown_updates=3",
                               "training.valid_every=3"])
    resumed = Trainer(TranslationTask(longer), resume=True, quiet=True)
    assert resumed.schedule.lr(6) == pytest.approx(0.003) and resumed.schedule.lr(11) == pytest.approx(0.001)


@pytest.mark.parametrize("settings", [["training.cooldown_updates=5"],
                                      ["training.max_updates=4", "training.cooldown_updates=5"],
                                      ["training.max_updates=4", "training.cooldown_updates=-1"]])
def test_a_cool_down_without_a_budget_to_end_is_refused(tiny_corpus, tmp_path, settings):
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "model")
    given = " and ".join(f"--set {item}" for item in reversed(settings))  # in the order the message names them
    with pytest.raises(ConfigError, match=rf"^{re.escape(given)}: training.cooldown_updates needs"):
        load_config(cfg, settings)
