"""One training per model directory: a second trainer, in this process or another, is
refused with the holder's pid while the first trains, and the lock goes with its process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ctxnmt.cli import main
from ctxnmt.config import load_config
from ctxnmt.training.trainer import Trainer
from ctxnmt.tasks.translation import TranslationTask
from ctxnmt.utils.lock import DirectoryBusy, TrainingLock
from tests.training.conftest import tiny_config

HOLD = "import sys, time; from ctxnmt.utils.lock import TrainingLock; held = TrainingLock(sys.argv[1]).acquire(); " \
       "print('held', flush=True); time.sleep(120)"


def test_a_directory_held_by_another_process_is_refused_until_that_process_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DirectoryBusy, match=f"another process \\(pid {holder.pid}\\) is training in it"):
            TrainingLock(tmp_path).acquire()
        holder.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel drops the lock
        holder.wait(timeout=30)
    finally:
        holder.kill()
    lock = TrainingLock(tmp_path).acquire()
    assert (tmp_path / ".lock").read_text() == str(os.getpid())
    lock.release()


def test_a_second_trainer_on_a_busy_directory_is_refused_and_one_after_it_is_not(tiny_corpus, tmp_path, capsys):
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, "unused")
    config = load_config(cfg, [f"model_dir={tmp_path / 'run'}", "training.max_epochs=0", "training.max_updates=3"])
    first = Trainer(TranslationTask(config), quiet=True)
    with pytest.raises(DirectoryBusy, match="is training in it"):
        Trainer(TranslationTask(config), quiet=True)
    assert main(["train", str(cfg), "--quiet", "--set", f"model_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"pid {os.getpid()}" in err
    start = time.monotonic()
    first.train()
    assert time.monotonic() - start < 120
    Trainer(TranslationTask(config), resume=True, quiet=True).train()  # the lock went with the first training's end


def test_a_fresh_start_where_a_training_is_is_refused_and_leaves_it_whole(tiny_corpus, tmp_path, capsys):
    """Without --resume, a second `ctxnmt train` into a trained directory would overwrite its
    checkpoints from update 0: it is refused with one line, and nothing there changes."""
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, "unused")
    run = tmp_path / "run"
    args = ["train", str(cfg), "--quiet", "--set", f"model_dir={run}", "--set", "training.max_updates=3"]
    assert main(args) == 0
    capsys.readouterr()
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert main(args) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{run}: already holds a training (done.json, checkpoints/last.pt); continue it with --resume" in err
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before
    assert main([*args, "--resume"]) == 0  # what the message offers works


def test_a_refused_resume_leaves_the_directory_s_config_as_trained(tiny_corpus, tmp_path, capsys):
    """config.yaml records how the directory's checkpoints were trained: a resume that the
    checkpoint refuses (another model) must not rewrite it first."""
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, "unused")
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--quiet", "--set", f"model_dir={run}", "--set", "training.max_updates=3"]) == 0
    saved = (run / "config.yaml").read_bytes()
    assert main(["train", str(cfg), "--quiet", "--resume", "--set", f"model_dir={run}",
                 "--set", "training.max_updates=6", "--set", "model.hidden_dim=32"]) != 0
    assert "hidden_dim" in capsys.readouterr().err
    assert (run / "config.yaml").read_bytes() == saved
