"""In-process checks of the stopping rules: a signal that lands on a validation update
leaves that validation to the resumed run (which then equals the uninterrupted one,
schedule and best checkpoint included), and training.checkpoint_every writes last.pt
between validations.  (Signals to real subprocesses: test_distributed.py.)"""
from __future__ import annotations

import os
import signal

import pytest
import torch

from ctxnmt.config import load_config
from ctxnmt.tasks import translation
from ctxnmt.training import trainer as trainer_module
from ctxnmt.utils.checkpoint import load_checkpoint
from ctxnmt.utils.preemption import Preempted
from ctxnmt.training.trainer import Trainer
from ctxnmt.tasks.translation import TranslationTask
from tests.training.conftest import tiny_config


def config(cfg, model_dir, *overrides):
    return load_config(cfg, [f"model_dir={model_dir}", "training.max_epochs=0", "training.max_updates=14",
                             "model.dropout_out=0.3", *overrides])


@pytest.fixture
def cfg(tiny_corpus, tmp_path):
    return tiny_config(tmp_path / "tiny.yaml", tiny_corpus, "unused")


def test_signal_on_a_validation_update_validates_first_on_resume(cfg, tmp_path):
    Trainer(TranslationTask(config(cfg, tmp_path / "straight")), quiet=True).train()
    interrupted = Trainer(TranslationTask(config(cfg, tmp_path / "interrupted")), quiet=True)
    step = interrupted.train_on

    def step_then_signal(*args):
        if interrupted.progress.update == 9:  # during update 10, a validation update (valid_every 10)
            os.kill(os.getpid(), signal.SIGTERM)
        return step(*args)

    interrupted.train_on = step_then_signal
    with pytest.raises(Preempted) as stopped:
        interrupted.train()
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    saved = load_checkpoint(tmp_path / "interrupted/checkpoints/last.pt")
    assert saved["progress"]["update"] == 10 and saved["progress"]["validation_due"]
    assert "validation at update 10" not in (tmp_path / "interrupted/train.log").read_text()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is gone again

    Trainer(TranslationTask(config(cfg, tmp_path / "interrupted")), resume=True, quiet=True).train()
    assert "validation at update 10" in (tmp_path / "interrupted/train.log").read_text()
    for name in ("last.pt", "best.pt"):
        a = load_checkpoint(tmp_path / "straight/checkpoints" / name)
        b = load_checkpoint(tmp_path / "interrupted/checkpoints" / name)
        assert a["progress"]["update"] == b["progress"]["update"]
        assert a["progress"]["best_metric"] == b["progress"]["best_metric"]
        assert a["schedule"] == b["schedule"]
        for key, tensor in a["model"].items():
            assert torch.equal(tensor, b["model"][key]), (name, key)


@pytest.mark.parametrize("rule, reason", [
    ("training.patience=2", "no improvement of dev ppl in 2 validations"),
    ("training.stop_at_min_lr=true", "the learning rate decayed to min_lr (0.003)")])
def test_a_stop_decided_by_the_postponed_validation_is_kept_on_resume(rule, reason, cfg, tmp_path, monkeypatch):
    """Dev perplexity worsens after update 2, so the validation at update 6 stops the run
    (patience 2, or lr 0.01 → 0.005 → 0.0025, under the floor of 0.003).  Signalled during
    update 6, the run leaves that validation to its resumed run, which must stop there too."""
    worsening = iter(range(10, 100))
    monkeypatch.setattr(translation, "validate", lambda *args: {"ppl": float(next(worsening))})
    settings = ["training.valid_every=2", "training.max_updates=40", "training.lr=0.01", "training.min_lr=0.003",
                "training.lr_patience=1", "training.patience=0", "training.early_stop_metric=ppl", rule]
    interrupted = Trainer(TranslationTask(config(cfg, tmp_path / "run", *settings)), quiet=True)
    step = interrupted.train_on

    def step_then_signal(*args):
        if interrupted.progress.update == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(*args)

    interrupted.train_on = step_then_signal
    with pytest.raises(Preempted):
        interrupted.train()
    progress = Trainer(TranslationTask(config(cfg, tmp_path / "run", *settings)), resume=True, quiet=True).train()
    assert progress.update == 6 and progress.stopped == reason


def test_checkpoint_every_writes_last_between_validations(cfg, tmp_path, monkeypatch):
    written = []
    save = trainer_module.save_model_checkpoint

    def record(path, payload):
        written.append((path.name, payload["progress"]["update"]))
        save(path, payload)

    monkeypatch.setattr(trainer_module, "save_model_checkpoint", record)
    Trainer(TranslationTask(config(cfg, tmp_path / "run", "training.checkpoint_every=3", "training.valid_every=100",
                                   "training.max_updates=7")), quiet=True).train()
    assert [update for name, update in written if name == "last.pt" and update < 7] == [3, 6]
    assert ("best.pt", 7) in written and ("last.pt", 7) in written  # the final validation


def test_ranks_agree_on_the_cause_whichever_rank_had_the_signal():
    """Votes are summed over ranks: rank 0 without a signal of its own still names the other's."""
    from ctxnmt.utils.preemption import LAUNCHER_EXIT, agreed_stop, stop_votes

    def summed(*ranks):
        return [sum(column) for column in zip(*(stop_votes(*rank) for rank in ranks))]

    assert agreed_stop(summed((0, False), (0, False))) == ("", 0)
    assert agreed_stop(summed((0, False), (signal.SIGINT, False))) == ("SIGINT", signal.SIGINT)
    assert agreed_stop(summed((signal.SIGTERM, False), (0, False))) == ("SIGTERM", signal.SIGTERM)
    # Two different signals: every rank takes the same one, the first in SIGNALS.
    assert agreed_stop(summed((signal.SIGTERM, False), (signal.SIGINT, False))) == ("SIGINT", signal.SIGINT)
    assert agreed_stop(summed((0, True), (0, False))) == (LAUNCHER_EXIT, signal.SIGTERM)
    assert agreed_stop(summed((signal.SIGINT, True), (0, True))) == ("SIGINT", signal.SIGINT)
