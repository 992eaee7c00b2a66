"""Data-parallel training through the real command line: 2 gloo ranks on CPU make the
updates of one process with the whole batch, checkpoints move between 1 and 2 ranks,
SIGINT/SIGTERM save last.pt and the resumed run equals the uninterrupted one, and a
killed rank fails the run at once without a half-written checkpoint."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ctxnmt.data.batching import make_batch
from ctxnmt.data.documents import previous_sentences
from ctxnmt.data.indexed import Side
from ctxnmt.data.vocab import EOS, PAD
from ctxnmt.utils.checkpoint import load_checkpoint
from ctxnmt.training.distributed import World
from tests.training.conftest import tiny_config

pytestmark = pytest.mark.slow

# Each rank is one thread; the rendezvous is on 127.0.0.1 (ctxnmt.training.launch).  The time limits
# only guard against a hang: on a 2-core machine shared with trainings one 2-rank run took over 300 s.
RUN_ENV = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}


def ctxnmt(*args, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctxnmt", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=RUN_ENV)


def start(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ctxnmt", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=RUN_ENV)


def train(cfg: Path, model_dir: Path, *extra, nproc: int = 1) -> subprocess.CompletedProcess:
    result = ctxnmt("train", cfg, "--quiet", "--set", f"model_dir={model_dir}", *extra,
                    *(["--nproc", nproc] if nproc > 1 else []))
    assert result.returncode == 0, result.stderr
    return result


def checkpoint(model_dir: Path) -> dict:
    return load_checkpoint(model_dir / "checkpoints" / "last.pt")


def assert_same_run(a: Path, b: Path, rel: float | None = None) -> None:
    """Equal parameters (exactly, or each tensor to `rel` in norm) after the same updates."""
    x, y = checkpoint(a), checkpoint(b)
    for key in ("update", "epoch", "position", "tokens"):
        assert x["progress"][key] == y["progress"][key], key
    for name, tensor in x["model"].items():
        if rel is None:
            assert torch.equal(tensor, y["model"][name]), name
        else:
            assert (tensor - y["model"][name]).norm() <= rel * tensor.norm(), name
    if rel is None:
        assert x["schedule"] == y["schedule"]


def wait_for_update(proc: subprocess.Popen, model_dir: Path, update: int, limit: float = 600) -> None:
    """Until rank 0's log reports `update` (log_every is 1)."""
    deadline = time.monotonic() + limit
    log = model_dir / "train.log"
    while f"update {update}:" not in (log.read_text() if log.is_file() else ""):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "training did not start"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def cfg(tiny_corpus, tmp_path_factory) -> Path:
    return tiny_config(tmp_path_factory.mktemp("cfg") / "tiny.yaml", tiny_corpus, "unused")


@pytest.fixture(scope="module")
def one_process(cfg, tmp_path_factory) -> Path:
    """One epoch (16 updates) in one process."""
    model_dir = tmp_path_factory.mktemp("runs") / "one"
    train(cfg, model_dir)
    return model_dir


def test_ranks_are_dealt_every_sentence_once():
    index = list(range(10, 17))
    shares = [World(rank=r, size=3).share(index) for r in range(3)]
    assert shares == [([10, 13, 16], 1.0), ([11, 14], 1.0), ([12, 15], 1.0)]
    # A rank left without a sentence runs a dummy one whose loss counts 0.
    assert [World(rank=r, size=3).share([5]) for r in range(3)] == [([5], 1.0), ([5], 0.0), ([5], 0.0)]


def test_each_sentence_keeps_its_document_context_on_its_rank():
    src = Side.from_lists([[4 + i, 4 + i] for i in range(9)])
    tgt = Side.from_lists([[5, EOS]] * 9)
    context = previous_sentences(["a"] * 5 + ["b"] * 4, 2)
    index = [8, 1, 4, 6, 2]

    def rows(batch, order):
        return {i: [[t for t in s if t != PAD] for s in batch.context.ids[r].tolist()] for r, i in enumerate(order)}

    whole = rows(make_batch(index, src, tgt, context, 2), index)
    assert whole[8] == [[10, 10], [11, 11]] and whole[1] == [[4, 4], []]
    for rank in (0, 1):
        share, _ = World(rank=rank, size=2).share(index)
        assert rows(make_batch(share, src, tgt, context, 2), share) == {i: whole[i] for i in share}


def test_two_ranks_make_the_updates_of_one_process(cfg, one_process, tmp_path):
    """Dropout 0: the ranks' shares see no random masks, so only summation order differs.
    The epoch's one-sentence batch leaves rank 1 a dummy share."""
    train(cfg, tmp_path / "two", nproc=2)
    assert checkpoint(one_process)["progress"]["update"] == 16
    assert_same_run(one_process, tmp_path / "two", rel=1e-5)
    assert checkpoint(tmp_path / "two")["world_size"] == 2
    log = (tmp_path / "two" / "train.log").read_text()
    assert "2 ranks" in log and "validation at update 10" in log


def test_checkpoints_resume_across_numbers_of_ranks(cfg, one_process, tmp_path):
    train(cfg, tmp_path / "two-then-one", "--set", "training.max_updates=6", nproc=2)
    train(cfg, tmp_path / "two-then-one", "--resume")
    assert_same_run(one_process, tmp_path / "two-then-one", rel=1e-5)
    train(cfg, tmp_path / "one-then-two", "--set", "training.max_updates=6")
    train(cfg, tmp_path / "one-then-two", "--resume", nproc=2)
    assert_same_run(one_process, tmp_path / "one-then-two", rel=1e-5)


def test_sigint_saves_in_every_rank_and_resume_equals_an_uninterrupted_run(cfg, tmp_path):
    """With dropout: each rank's generators are saved and restored."""
    settings = ["--set", "model.dropout_out=0.3", "--set", "training.max_epochs=0", "--set", "training.max_updates=80"]
    train(cfg, tmp_path / "straight", *settings, nproc=2)
    model_dir = tmp_path / "interrupted"
    proc = start("train", cfg, "--quiet", "--set", f"model_dir={model_dir}", *settings, "--nproc", 2)
    wait_for_update(proc, model_dir, 3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    saved = checkpoint(model_dir)["progress"]["update"]
    assert 3 <= saved < 80
    for rank in (0, 1):
        assert (f"ctxnmt train (rank {rank}): stopped by SIGINT at update {saved}; saved {model_dir}/checkpoints/"
                f"last.pt; resume with: ctxnmt train {model_dir}/config.yaml --resume --nproc 2") in err
    assert not (model_dir / "done.json").exists()
    result = ctxnmt("train", model_dir / "config.yaml", "--resume", "--quiet", "--nproc", 2)
    assert result.returncode == 0, result.stderr
    assert_same_run(tmp_path / "straight", model_dir)


def test_a_signal_to_one_rank_stops_every_rank_with_its_name(cfg, tmp_path):
    """The launcher passes a signal on to one rank after the other, so a rank can decide to
    stop before its own signal arrives; here only rank 1 ever gets one."""
    model_dir = tmp_path / "rank1"
    proc = start("train", cfg, "--quiet", "--set", f"model_dir={model_dir}", "--set", "training.max_epochs=0",
                 "--set", "training.max_updates=80", "--nproc", 2)
    wait_for_update(proc, model_dir, 3)
    rank1 = [pid for pid in _children(proc.pid) if _environ(pid).get("RANK") == "1"]
    os.kill(rank1[0], signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    saved = checkpoint(model_dir)["progress"]["update"]
    for rank in (0, 1):
        assert f"ctxnmt train (rank {rank}): stopped by SIGINT at update {saved};" in err


def test_sigterm_saves_and_resume_equals_an_uninterrupted_run(cfg, tmp_path):
    settings = ["--set", "model.dropout_out=0.3", "--set", "training.max_epochs=0", "--set", "training.max_updates=80"]
    train(cfg, tmp_path / "straight", *settings)
    model_dir = tmp_path / "interrupted"
    proc = start("train", cfg, "--quiet", "--set", f"model_dir={model_dir}", *settings)
    wait_for_update(proc, model_dir, 3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 143, err
    saved = checkpoint(model_dir)["progress"]["update"]
    assert err.strip().splitlines()[-1] == (f"ctxnmt train: stopped by SIGTERM at update {saved}; saved {model_dir}/"
                                            f"checkpoints/last.pt; resume with: ctxnmt train {model_dir}/config.yaml "
                                            f"--resume")
    result = ctxnmt("train", model_dir / "config.yaml", "--resume", "--quiet")
    assert result.returncode == 0, result.stderr
    assert_same_run(tmp_path / "straight", model_dir)


def test_a_killed_rank_fails_the_run_at_once(cfg, tmp_path):
    model_dir = tmp_path / "killed"
    proc = start("train", cfg, "--quiet", "--set", f"model_dir={model_dir}", "--set", "training.max_epochs=0",
                 "--set", "training.checkpoint_every=2", "--set", "training.valid_every=1000", "--nproc", 2)
    wait_for_update(proc, model_dir, 5)
    rank1 = [pid for pid in _children(proc.pid) if _environ(pid).get("RANK") == "1"]
    assert len(rank1) == 1
    killed_at = time.monotonic()
    os.kill(rank1[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0 and time.monotonic() - killed_at < 90  # the launcher kills after 30 s
    assert "rank 1 was killed by SIGKILL" in err
    assert "ctxnmt train: error: rank 0: a collective failed while" in err and "another rank has probably died" in err
    files = sorted(p.name for p in (model_dir / "checkpoints").iterdir())
    assert files == ["last.pt"]  # written whole (atomically) or not at all
    assert checkpoint(model_dir)["progress"]["update"] >= 4


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        if entry.name.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def test_a_ranks_entry_frees_its_trainer_before_the_interpreter_shuts_down(cfg, tmp_path):
    """The trainer sits in reference cycles; a rank's DDP inside it keeps gloo's process group
    alive until it is collected.  `python -m ctxnmt` collects before exiting, so nothing of the
    training is left to the interpreter's shutdown, where gloo's threads could abort the rank."""
    import gc

    from ctxnmt.cli import run_as_rank
    from ctxnmt.training.trainer import Trainer

    gc.collect()
    gc.disable()  # no automatic collection may hide a cycle the entry leaves behind
    try:
        code = run_as_rank(["train", str(cfg), "--quiet", "--set", f"model_dir={tmp_path / 'm'}",
                            "--set", "training.max_epochs=0", "--set", "training.max_updates=2"])
        left = [obj for obj in gc.get_objects() if type(obj) is Trainer]
    finally:
        gc.enable()
    assert code == 0 and left == []
