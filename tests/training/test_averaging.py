"""Checkpoint averaging: the last N checkpoints a training keeps, and their element-wise mean
(fairseq's scripts/average_checkpoints.py: every parameter summed and divided by N)."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.config import ConfigError, load_config
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import CheckpointError
from ctxnmt.models.migrations import load_model_checkpoint, save_model_checkpoint
from ctxnmt.training.averaging import average, kept_checkpoints, last_kept, write_average
from ctxnmt.training.trainer import Trainer
from ctxnmt.tasks.translation import TranslationTask
from tests.training.conftest import tiny_config


def fake(path, weight, steps=torch.tensor(3), vocab="v1"):
    save_model_checkpoint(path, {"model": {"w": weight, "steps": steps}, "src_vocab": vocab, "tgt_vocab": "t",
                                 "model_config": {"hidden_dim": 2}, "progress": {"update": int(weight.sum())},
                                 "optimizer": {"state": {}}})
    return path


def test_the_average_is_the_element_wise_mean_in_each_parameter_s_type(tmp_path):
    a = fake(tmp_path / "a.pt", torch.tensor([1.0, 2.0, -4.0]))
    b = fake(tmp_path / "b.pt", torch.tensor([2.0, 2.0, 0.0]))
    c = fake(tmp_path / "c.pt", torch.tensor([0.0, 5.0, 1.0]))
    mean = average([a, b, c])
    assert torch.equal(mean["model"]["w"], torch.tensor([1.0, 3.0, -1.0]))
    assert mean["model"]["w"].dtype == torch.float32
    assert torch.equal(mean["model"]["steps"], torch.tensor(3))  # an integer buffer that agrees is kept
    assert mean["progress"] == {"update": 6}  # the last checkpoint's record (c's)
    assert "optimizer" not in mean and mean["averaged"] == [str(a), str(b), str(c)]


def test_checkpoints_of_different_models_are_refused_naming_the_file(tmp_path):
    a = fake(tmp_path / "a.pt", torch.tensor([1.0, 2.0]))
    with pytest.raises(CheckpointError, match=r"other\.pt: src_vocab differs from .*a\.pt's"):
        average([a, fake(tmp_path / "other.pt", torch.tensor([1.0, 2.0]), vocab="v2")])
    with pytest.raises(CheckpointError, match=r"wide\.pt: w has shape \(3,\), \(2,\) in"):
        average([a, fake(tmp_path / "wide.pt", torch.tensor([1.0, 2.0, 3.0]))])
    with pytest.raises(CheckpointError, match=r"count\.pt: steps differs"):
        average([a, fake(tmp_path / "count.pt", torch.tensor([1.0, 2.0]), steps=torch.tensor(4))])
    (tmp_path / "broken.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"broken\.pt: corrupt"):
        average([a, tmp_path / "broken.pt"])
    assert not (tmp_path / "out.pt").exists()


def test_training_keeps_the_last_n_weights_and_their_average_translates(tiny_corpus, tmp_path):
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "model")
    config = load_config(cfg, ["training.max_epochs=0", "training.max_updates=12", "training.valid_every=4",
                               "training.checkpoint_every=2", "training.keep_checkpoints=3"])
    Trainer(TranslationTask(config), quiet=True).train()
    kept = kept_checkpoints(tmp_path / "model" / "checkpoints")
    assert [p.name for p in kept] == ["update-8.pt", "update-10.pt", "update-12.pt"]
    payload = load_model_checkpoint(kept[-1])
    assert "optimizer" not in payload and "rng_ranks" not in payload
    last = load_model_checkpoint(tmp_path / "model" / "checkpoints" / "last.pt")
    assert all(torch.equal(payload["model"][k], v) for k, v in last["model"].items())

    out = tmp_path / "average.pt"
    write_average(last_kept(tmp_path / "model", 3), out)
    mean = load_model_checkpoint(out)["model"]
    name = next(iter(mean))
    expected = sum(load_model_checkpoint(p)["model"][name].double() for p in kept) / 3
    assert torch.allclose(mean[name].double(), expected, atol=1e-7)
    translator = Translator.load(tmp_path / "model", checkpoint=str(out))
    assert all(torch.equal(v, mean[k]) for k, v in translator.model.state_dict().items())
    assert translator.translate(["el gato come ."])[0].score < 0
    with pytest.raises(CheckpointError, match=r"3 kept checkpoint\(s\) .* 4 asked for .*keep_checkpoints: 4"):
        last_kept(tmp_path / "model", 4)


def test_a_negative_number_to_keep_is_refused(tiny_corpus, tmp_path):
    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, tmp_path / "model")
    with pytest.raises(ConfigError, match="training.keep_checkpoints"):
        load_config(cfg, ["training.keep_checkpoints=-1"])
