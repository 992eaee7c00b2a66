"""Mixed precision for training: autocast for the forward pass, loss scaling for fp16.

Parameters, gradients and optimiser moments stay float32; autocast runs the products
in bf16 or fp16.  The loss and its softmax stay float32 (ctxnmt.models.functional casts
its input on CPU; on CUDA its custom_fwd does).  fp16's narrow range needs a GradScaler:
the loss is multiplied before the backward pass, the gradients divided before
clipping, and an update whose gradients overflowed is skipped.  Validation and
decoding run in float32.
"""
from __future__ import annotations

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}  # of training.precision; fp32 needs no autocast


class Precision:
    def __init__(self, name: str, device: torch.device):
        self.name = name
        self.dtype = DTYPES.get(name)
        self.device_type = device.type
        self.scaler = torch.amp.GradScaler(device.type, enabled=name == "fp16")

    def autocast(self, cache: bool = True):
        """The forward pass's context; `cache` False for a CUDA graph, which must not keep
        autocast's casts of the parameters from one capture to the next."""
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.dtype is not None, cache_enabled=cache)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, params, clip_norm: float) -> None:
        """Unscale (fp16), clip the gradient norm, and step unless the gradients overflowed."""
        self.scaler.unscale_(optimizer)
        if clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, clip_norm)
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict:
        return self.scaler.state_dict()  # empty unless fp16

    def load_state_dict(self, state: dict | None) -> None:
        if state and self.scaler.is_enabled():  # a run switched to fp16 starts with a fresh scale
            self.scaler.load_state_dict(state)
