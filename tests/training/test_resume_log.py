"""A resumed run logs the lines of the uninterrupted one: checkpoints keep the log window
(the loss and tokens since the last log line), not only the parameters."""
from __future__ import annotations

import re

import pytest
import torch

from ctxnmt.config import load_config
from ctxnmt.training.trainer import Trainer
from ctxnmt.tasks.translation import TranslationTask
from tests.training.conftest import tiny_config


def logged_losses(model_dir) -> dict[int, str]:
    text = (model_dir / "train.log").read_text(encoding="utf-8")
    return {int(u): loss for u, loss in re.findall(r"update (\d+): loss/token (\S+),", text)}


# older: a last.pt written before translation and the LM shared one progress record, which
# named the position in the epoch `batch_in_epoch`
@pytest.mark.parametrize("older", [False, True])
def test_a_run_resumed_mid_window_logs_the_uninterrupted_run_s_losses(older, tiny_corpus, tmp_path):
    settings = ["training.max_epochs=0", "training.log_every=5", "training.valid_every=100"]
    straight = load_config(tiny_config(tmp_path / "a.yaml", tiny_corpus, tmp_path / "straight"),
                           [*settings, "training.max_updates=12"])
    Trainer(TranslationTask(straight), quiet=True).train()
    cfg = tiny_config(tmp_path / "b.yaml", tiny_corpus, tmp_path / "resumed")
    # stops inside 6–10
    Trainer(TranslationTask(load_config(cfg, [*settings, "training.max_updates=7"])), quiet=True).train()
    if older:
        last = tmp_path / "resumed/checkpoints/last.pt"
        payload = torch.load(last, weights_only=True)
        payload["progress"]["batch_in_epoch"] = payload["progress"].pop("position")
        torch.save(payload, last)
    Trainer(TranslationTask(load_config(cfg, [*settings, "training.max_updates=12"])), resume=True, quiet=True).train()
    want, got = logged_losses(tmp_path / "straight"), logged_losses(tmp_path / "resumed")
    assert sorted(want) == [5, 10] and got == want  # update 10's window holds updates 6–10 in both
    a, b = (torch.load(tmp_path / run / "checkpoints/last.pt", weights_only=True)["model"]
            for run in ("straight", "resumed"))
    assert all(torch.equal(a[k], b[k]) for k in a)
