"""training.precision on CPU: under bf16 autocast every model variant trains through the
plain PyTorch path (the fused kernels serve float32 only) with a float32 loss close to
float32 training's; fp16 keeps its loss scale across a resume."""
from __future__ import annotations

import math

import pytest
import torch

from ctxnmt.config import ModelConfig, load_config
from ctxnmt.data.batching import make_batch
from ctxnmt.data.documents import previous_sentences
from ctxnmt.data.indexed import Side
from ctxnmt.errors import ConfigError
from ctxnmt.models.nmt import build_model
from ctxnmt.utils.checkpoint import load_checkpoint
from ctxnmt.training.trainer import Trainer
from ctxnmt.tasks.translation import TranslationTask
from tests.training.conftest import tiny_config
from tests.training.test_overfit import synthetic_pairs

VARIANTS = [
    {},
    {"target_context": "self-attentive"},
    {"decoder": "memory-rnn"},
    {"decoder": "self-attentive-rnn", "output": "adaptive"},
    {"encoder": "fcae", "cell": "adaptive-gru"},
    {"doc_aux": "gated-aux", "doc_init_dec": True},
]


def loss_and_grads(model, batch, precision: str):
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        nll, _ = model.loss(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask, context=batch.context)
    nll.backward()
    return nll.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("switches", VARIANTS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "rnnsearch")
def test_bf16_autocast_gives_a_float32_loss_close_to_float32(switches):
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(emb_dim=16, hidden_dim=32, att_dim=16, dropout_out=0.0, **switches), 30, 30)
    pairs = synthetic_pairs(16)
    src, tgt = Side.from_lists([s for s, _ in pairs]), Side.from_lists([t for _, t in pairs])
    batch = make_batch(list(range(16)), src, tgt, previous_sentences([f"d{i // 4}" for i in range(16)], 2), 2)
    nll32, grads32 = loss_and_grads(model, batch, "fp32")
    nll16, grads16 = loss_and_grads(model, batch, "bf16")
    assert nll16.dtype == torch.float32 and math.isfinite(float(nll16))
    assert abs(float(nll16) - float(nll32)) <= 1e-2 * float(nll32)
    assert grads16.keys() == grads32.keys()
    assert all(torch.isfinite(g).all() for g in grads16.values())
    # All parameters together (a single small bias's gradient can be mostly cancellation, which bf16 blurs).
    full32 = torch.cat([g.flatten() for g in grads32.values()])
    full16 = torch.cat([grads16[name].flatten() for name in grads32])
    assert (full16 - full32).norm() <= 2e-2 * full32.norm()


@pytest.fixture
def cfg(tiny_corpus, tmp_path):
    return tiny_config(tmp_path / "tiny.yaml", tiny_corpus, "unused")


def losses_of(cfg, model_dir, precision: str, updates: int = 6) -> tuple[Trainer, list[float]]:
    trainer = Trainer(TranslationTask(load_config(cfg, [f"model_dir={model_dir}", f"training.precision={precision}",
                                                        f"training.max_updates={updates}"])), quiet=True)
    losses, step = [], trainer.train_on

    def recorded(*args):
        loss, tokens = step(*args)
        losses.append(loss / tokens)
        return loss, tokens

    trainer.train_on = recorded
    trainer.train()
    return trainer, losses


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_training_follows_float32(cfg, tmp_path, precision):
    _, reference = losses_of(cfg, tmp_path / "fp32", "fp32")
    trainer, losses = losses_of(cfg, tmp_path / precision, precision)
    assert all(math.isfinite(x) for x in losses)
    assert losses == pytest.approx(reference, rel=2e-2)
    assert reference[-1] < reference[0] and losses[-1] < losses[0]  # both learn
    scale = load_checkpoint(tmp_path / precision / "checkpoints/last.pt")["precision"].get("scale")
    if precision == "fp16":  # the loss scale is part of the state a resume restores
        assert scale == trainer.precision.scaler.get_scale()
        resumed = Trainer(TranslationTask(load_config(cfg, [f"model_dir={tmp_path / precision}",
                                                            "training.precision=fp16"])),
                          resume=True, quiet=True)
        assert resumed.precision.scaler.get_scale() == scale
    else:
        assert scale is None


def test_unknown_precision_is_refused(cfg):
    with pytest.raises(ConfigError, match="training.precision must be one of fp32, bf16, fp16, not 'fp8'"):
        load_config(cfg, ["training.precision=fp8"])
