"""Recurrent cells with the input projection split from the recurrence.

Every cell exposes three pieces so that callers can move work out of the time
loop:
  input_proj(x)          W x + b for a whole sequence at once (outside the loop)
  hidden_weight()        the matrix U with h @ U giving all recurrent terms
  combine(xp, hp, h)     the gate arithmetic; parameter-free, so the same code
                         runs on stacked directions or beams
`step(xp, h)` is the plain one-step call built from them, and `combine_held(xp, hp,
h, mask)` the gate arithmetic with the state held on padding.  A cell declares whether
it has a hyper-gate (`hyper_gated`, what analyses of the gates ask) and may start its
own biases (`init_biases`).  `scan` and `final_state` run one cell over a sequence;
functional.biscan runs two directions at once.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ctxnmt.models.functional import gru_gates, hold_on_padding, plain_gru_gates, read_every_step, step_product
from ctxnmt.models.registry import CELLS


class RecurrentCell(nn.Module):
    """Base: `n_blocks` gate blocks of size hidden_size, one input and one recurrent matrix."""

    n_blocks = 3
    hyper_gated = False  # whether the gates weigh input against state by a hyper-gate (`hyper_gate`)

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.W = nn.Linear(input_size, self.n_blocks * hidden_size)
        self.U = nn.Linear(hidden_size, self.n_blocks * hidden_size, bias=False)  # n_blocks square blocks

    def input_proj(self, x: torch.Tensor) -> torch.Tensor:
        return self.W(x)

    def hidden_weight(self) -> torch.Tensor:
        return self.U.weight.t()

    def step(self, xp: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.combine(xp, step_product(h, self.hidden_weight()), h)

    @classmethod
    def second_transition(cls) -> type[RecurrentCell]:
        """The cell class of the cGRU's second transition (the one that reads c_t)."""
        return cls

    @staticmethod
    def combine(xp: torch.Tensor, hp: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def init_biases(self) -> None:
        """Biases that the cell's equations want away from the model's initialisation (a gate
        that starts open); none by default."""

    @classmethod
    def combine_held(cls, xp: torch.Tensor, hp: torch.Tensor, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """combine, keeping h where mask (1 for real tokens) is 0."""
        return hold_on_padding(cls.combine(xp, hp, h), h, mask)


@CELLS.register("gru")
class GRUCell(RecurrentCell):
    """The dl4mt/Nematus GRU.

    r = σ(W_r x + U_r h), z = σ(W_z x + U_z h),
    h̃ = tanh(W x + r ⊙ (U h)),  h' = z ⊙ h + (1 − z) ⊙ h̃.
    The reset gate multiplies U h (not h) as in dl4mt, which lets all three
    recurrent products share one matrix multiplication.  On CPU and CUDA the gates
    run as one fused kernel (functional.gru_gates); `reference_combine` is the same
    arithmetic in PyTorch operations, which runs wherever those cannot.  It is also
    torch.nn.GRU's cell with its recurrent bias at zero, which lets a bidirectional
    layer run through cuDNN on CUDA (functional.bigru).
    """

    def stored_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(W, b, U) laid out as torch's GRU stores its w_ih, b_ih and w_hh (functional.bigru)."""
        return self.W.weight, self.W.bias, self.U.weight

    @staticmethod
    def combine(xp: torch.Tensor, hp: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return gru_gates(xp, hp, h)

    @staticmethod
    def combine_held(xp: torch.Tensor, hp: torch.Tensor, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return gru_gates(xp, hp, h, mask)

    reference_combine = staticmethod(plain_gru_gates)


@CELLS.register("adaptive-gru")
class AdaptiveGRUCell(RecurrentCell):
    """The hyper-gated GRU (Li, Li, Zhang: adaptive weighting for NMT).

    g = σ(W_g x + U_g h) weighs the input term against the state term in every gate:
      r = σ((1 − g) ⊙ W_r x + g ⊙ U_r h),  z = σ((1 − g) ⊙ W_z x + g ⊙ U_z h),
      h̃ = tanh((1 − g) ⊙ W x + g ⊙ r ⊙ (U h)),  h' = g ⊙ z ⊙ h + (1 − z) ⊙ h̃.
    W_g x and U_g h are a fourth block of the usual W and U, so the hyper-gate costs
    no extra matrix multiplication inside the time loop; biases belong to W x and
    are weighted with it.  As in GRUCell (and in the authors' released code) the
    reset gate multiplies U h, not h.
    """

    n_blocks = 4
    hyper_gated = True
    gain = 1.0  # multiplies the weighted sums of r, z and h̃; see ScaledAdaptiveGRUCell

    @staticmethod
    def hyper_gate(xp: torch.Tensor, hp: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(xp[..., 3 * xp.size(-1) // 4:] + hp[..., 3 * hp.size(-1) // 4:])

    @classmethod
    def _weigh(cls, g: torch.Tensor, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The weighted sum inside r and z: (1 − g) x + g h, with one multiplication."""
        return cls.gain * (x + g * (h - x))

    @classmethod
    def _weigh_candidate(cls, g: torch.Tensor, x: torch.Tensor, r: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The weighted sum inside h̃: (1 − g) W x + g ⊙ r ⊙ (U h)."""
        return cls.gain * ((1 - g) * x + g * r * h)

    @classmethod
    def _gates(cls, xp: torch.Tensor, hp: torch.Tensor):
        x_r, x_z, x_h, x_g = xp.chunk(4, dim=-1)
        h_r, h_z, h_h, h_g = hp.chunk(4, dim=-1)
        g = torch.sigmoid(x_g + h_g)
        return g, torch.sigmoid(cls._weigh(g, x_r, h_r)), torch.sigmoid(cls._weigh(g, x_z, h_z)), x_h, h_h

    @classmethod
    def combine(cls, xp: torch.Tensor, hp: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        g, r, z, x_h, h_h = cls._gates(xp, hp)
        candidate = torch.tanh(cls._weigh_candidate(g, x_h, r, h_h))
        return candidate + z * (g * h - candidate)


@CELLS.register("adaptive-gru-scaled")
class ScaledAdaptiveGRUCell(AdaptiveGRUCell):
    """adaptive-gru with the weighted sums of r, z and h̃ times 2, the number of weighted
    sources: the hyper-gate starts near 1/2, so the published form starts every gate and
    the candidate at half the plain GRU's pre-activation, and the optimiser's steps on W
    and U move them half as far.  With the gain, g = 1/2 gives exactly the GRU's gates and
    candidate; the gain can be folded into W and U, so the family is the paper's.  The
    update h' = g ⊙ z ⊙ h + (1 − z) ⊙ h̃ is the paper's (its g has no such reading)."""

    gain = 2.0


@CELLS.register("adaptive-gru-balanced")
class BalancedAdaptiveGRUCell(AdaptiveGRUCell):
    """adaptive-gru whose hyper-gate starts open at g₀ = 0.8 (its bias b_g = logit g₀), with
    the input term weighed by (1 − g)/(1 − g₀) and the state term by g/g₀ inside r, z and h̃.
    At g = g₀ the gates and candidate are the plain GRU's, as in adaptive-gru-scaled
    (which is g₀ = 1/2); unlike it, the carried state g ⊙ z ⊙ h starts at 0.8 of the GRU's
    instead of half, so a state is not halved at every step before training has learned to
    open g.  Both weights fold into W and U (g₀ is a constant), so the family is the paper's."""

    open_gate = 0.8  # g₀

    def init_biases(self) -> None:
        """b_g = logit g₀; the other biases keep the model's initialisation."""
        with torch.no_grad():
            self.W.bias[3 * self.hidden_size:].fill_(math.log(self.open_gate / (1 - self.open_gate)))

    @classmethod
    def _weigh(cls, g: torch.Tensor, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        g0 = cls.open_gate
        return (1 - g) / (1 - g0) * x + g / g0 * h

    @classmethod
    def _weigh_candidate(cls, g: torch.Tensor, x: torch.Tensor, r: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return cls._weigh(g, x, r * h)


class ScaledCandidateAdaptiveGRUCell(AdaptiveGRUCell):
    """The released code's second cGRU transition: (1 − g) scales the whole candidate,
    h̃ = (1 − g) ⊙ tanh(W c + g ⊙ r ⊙ (U h)); gates and update as in AdaptiveGRUCell."""

    @classmethod
    def combine(cls, xp: torch.Tensor, hp: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        g, r, z, x_h, h_h = cls._gates(xp, hp)
        candidate = (1 - g) * torch.tanh(x_h + g * r * h_h)
        return candidate + z * (g * h - candidate)


@CELLS.register("adaptive-gru-released")
class ReleasedAdaptiveGRUCell(AdaptiveGRUCell):
    """adaptive-gru with the released code's second decoder transition
    (ScaledCandidateAdaptiveGRUCell); the paper's form everywhere else."""

    @classmethod
    def second_transition(cls) -> type[RecurrentCell]:
        return ScaledCandidateAdaptiveGRUCell


def scan(cell: RecurrentCell, xp: torch.Tensor, h0: torch.Tensor, mask: torch.Tensor,
         reverse: bool = False) -> torch.Tensor:
    """Run `cell` over a (B, T, G·H) input projection; returns (B, T, H) states."""
    steps = range(xp.size(1) - 1, -1, -1) if reverse else range(xp.size(1))
    U = read_every_step(cell.hidden_weight())
    # unbind, not xp[:, t]: the backward of a slice would allocate a full-size
    # zero tensor at every step, which costs more than the recurrence itself.
    xs, ms = xp.unbind(1), mask.unbind(1)
    h, out = h0, [None] * xp.size(1)
    for t in steps:
        h = cell.combine_held(xs[t], step_product(h, U), h, ms[t])
        out[t] = h
    return torch.stack(out, dim=1)


def final_state(cell: RecurrentCell, xp: torch.Tensor, h0: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The last state (B, H) of a forward scan; padding holds it, so it is each row's
    state after its last real position (h0 for a row with none)."""
    U = read_every_step(cell.hidden_weight())
    h = h0
    for x_t, m_t in zip(xp.unbind(1), mask.unbind(1)):  # unbind: see scan()
        h = cell.combine_held(x_t, step_product(h, U), h, m_t)
    return h
