"""Source encoders (ctxnmt.models.interfaces.Encoder). Each returns annotations (B, S,
out_dim); `out_dim` tells the decoder how wide they are, so attention and initialisation
sizes follow from the encoder rather than from constants.

Every recurrence holds its state on padding (functional.hold_on_padding), so a
sentence gets the same annotations alone and in a padded batch.  Every encoder
takes an optional initial state h0 (B, state_dim) for all of its recurrences
(document context initialises the encoder with it); None is the usual zero
state.  Besides `forward`, an encoder lists its recurrences by name with their cells
(`recurrence_cells`) and, for each, the input projection and the state each step read
(`recurrences`), which is all an analysis needs to recompute a cell's gates outside
the time loop."""
from __future__ import annotations


import torch
from torch import nn

from ctxnmt.models.cells import GRUCell, RecurrentCell, scan
from ctxnmt.models.functional import bigru, biscan, hold_on_padding, read_every_step, step_product
from ctxnmt.models.interfaces import Encoder, Recurrence
from ctxnmt.models.registry import CELLS, ENCODERS
from ctxnmt.models.settings import ModelConfig, StackedSettings


def earlier_states(states: torch.Tensor, reverse: bool = False, h0: torch.Tensor | None = None) -> torch.Tensor:
    """The state each step read: h_{i−1} (h_{i+1} when reading right to left), h_0 = `h0` or 0."""
    start = states.new_zeros(states.size(0), 1, states.size(2)) if h0 is None else h0.unsqueeze(1)
    if reverse:
        return torch.cat([states[:, 1:], start], dim=1)
    return torch.cat([start, states[:, :-1]], dim=1)


class RecurrentEncoder(Encoder):
    """An encoder whose recurrences share one cell kind: model.encoder_cell, or model.cell
    where that is empty."""

    @staticmethod
    def cell_of(cfg: ModelConfig) -> str:
        return cfg.encoder_cell or cfg.cell

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> Encoder:
        return cls(cfg.emb_dim, cfg.hidden_dim, cls.cell_of(cfg))


class BiRNNLayer(nn.Module):
    """One bidirectional layer: a forward and a backward cell, run in one loop."""

    def __init__(self, input_dim: int, hidden_dim: int, cell: str):
        super().__init__()
        cell_cls = CELLS.get(cell)
        self.fwd = cell_cls(input_dim, hidden_dim)
        self.bwd = cell_cls(input_dim, hidden_dim)
        self.hidden_dim = self.state_dim = hidden_dim

    def directions(self, x: torch.Tensor, mask: torch.Tensor, h0: torch.Tensor | None = None):
        """h0 starts both directions (as in Wang et al.'s released code)."""
        xp_f, xp_b = self.fwd.input_proj(x), self.bwd.input_proj(x)
        if h0 is None:
            h0 = x.new_zeros(x.size(0), self.hidden_dim)
        fwd, bwd = biscan(self.fwd, self.bwd, xp_f, xp_b, h0, mask)
        return (xp_f, fwd), (xp_b, bwd)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
        if type(self.fwd) is GRUCell:  # the dl4mt GRU: functional.bigru, through cuDNN where that serves
            fwd, bwd = bigru(x, self.fwd.stored_weights(), self.bwd.stored_weights(), h0, mask)
        else:  # `directions` also returns the input projections, for analyses
            (_, fwd), (_, bwd) = self.directions(x, mask, h0)
        return torch.cat([fwd, bwd], dim=-1)

    def recurrence_cells(self, prefix: str = "") -> dict[str, RecurrentCell]:
        return {f"{prefix}forward": self.fwd, f"{prefix}backward": self.bwd}

    def traced(self, x, mask, h0=None, prefix: str = "") -> tuple[torch.Tensor, dict[str, Recurrence]]:
        """The layer's output and its two recurrences."""
        (xp_f, fwd), (xp_b, bwd) = self.directions(x, mask, h0)
        return torch.cat([fwd, bwd], dim=-1), {
            f"{prefix}forward": Recurrence(self.fwd, xp_f, earlier_states(fwd, h0=h0)),
            f"{prefix}backward": Recurrence(self.bwd, xp_b, earlier_states(bwd, reverse=True, h0=h0))}

    def recurrences(self, x, mask, h0=None):
        return self.traced(x, mask, h0)[1]


@ENCODERS.register("birnn")
class BiRNNEncoder(BiRNNLayer, RecurrentEncoder):
    """h_i = [→h_i; ←h_i] from a forward and a backward GRU over the embeddings."""

    words = "bidirectional GRU encoder"

    def __init__(self, emb_dim: int, hidden_dim: int, cell: str = "gru", **_):
        super().__init__(emb_dim, hidden_dim, cell)
        self.out_dim = 2 * hidden_dim


@ENCODERS.register("stacked-birnn")
class StackedBiRNNEncoder(RecurrentEncoder):
    """N bidirectional layers; layer k reads [→h_i; ←h_i] of layer k − 1 (the first
    reads the embeddings); the annotations are the top layer's."""

    words = "stacked bidirectional GRU encoder ({encoder_layers} layers)"

    def __init__(self, emb_dim: int, hidden_dim: int, cell: str = "gru", layers: int = 2, **_):
        super().__init__()
        self.layers = nn.ModuleList(
            BiRNNLayer(emb_dim if k == 0 else 2 * hidden_dim, hidden_dim, cell) for k in range(layers))
        self.out_dim = 2 * hidden_dim
        self.state_dim = hidden_dim

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> Encoder:
        return cls(cfg.emb_dim, cfg.hidden_dim, cls.cell_of(cfg), cfg.settings(StackedSettings).encoder_layers)

    def forward(self, emb, mask, h0=None):
        """h0 starts every layer's two directions."""
        x = emb
        for layer in self.layers:
            x = layer(x, mask, h0)
        return x

    def recurrence_cells(self):
        cells = {}
        for k, layer in enumerate(self.layers):
            cells.update(layer.recurrence_cells(prefix=f"layer{k + 1}-"))
        return cells

    def recurrences(self, emb, mask, h0=None):
        out, x = {}, emb
        for k, layer in enumerate(self.layers):
            x, recs = layer.traced(x, mask, h0, prefix=f"layer{k + 1}-")
            out.update(recs)
        return out


class ContextAwareEncoder(RecurrentEncoder):
    """CAEncoder (Zhang, Xiong, Su, Duan): a future-context GRU reads the source in
    one direction, h^c_i; the context-aware GRU reads it in the other with two
    levels per position,
      h̃_i = GRU_lower(E x_i, h^a_{i∓1})    (history)
      h^a_i = GRU_upper(h^c_i, h̃_i)        (input h^c_i, state h̃_i: history meets future)
    and the annotations are h^a_i alone: d-dimensional, not 2d.  `context_reverse`
    says whether the context-aware layer reads right to left (bcae, as in the
    authors' released code) or left to right (fcae)."""

    context_reverse: bool

    def __init__(self, emb_dim: int, hidden_dim: int, cell: str = "gru", **_):
        super().__init__()
        cell_cls = CELLS.get(cell)
        self.future = cell_cls(emb_dim, hidden_dim)
        self.lower = cell_cls(emb_dim, hidden_dim)
        self.upper = cell_cls(hidden_dim, hidden_dim)
        self.hidden_dim = self.out_dim = self.state_dim = hidden_dim

    def _run(self, emb: torch.Tensor, mask: torch.Tensor, h0: torch.Tensor | None = None):
        """h0 starts both the future-context and the context-aware recurrence."""
        if h0 is None:
            h0 = emb.new_zeros(emb.size(0), self.hidden_dim)
        future = scan(self.future, self.future.input_proj(emb), h0, mask, reverse=not self.context_reverse)
        xp_lower, xp_upper = self.lower.input_proj(emb), self.upper.input_proj(future)
        U_lower, U_upper = read_every_step(self.lower.hidden_weight()), read_every_step(self.upper.hidden_weight())
        T = emb.size(1)
        steps = range(T - 1, -1, -1) if self.context_reverse else range(T)
        xs_lower, xs_upper, ms = xp_lower.unbind(1), xp_upper.unbind(1), mask.unbind(1)  # unbind: see scan()
        h, history, annotations = h0, [None] * T, [None] * T
        for i in steps:
            tilde = self.lower.combine(xs_lower[i], step_product(h, U_lower), h)
            new = self.upper.combine(xs_upper[i], step_product(tilde, U_upper), tilde)
            h = hold_on_padding(new, h, ms[i])
            history[i], annotations[i] = tilde, h
        return future, xp_lower, xp_upper, torch.stack(history, 1), torch.stack(annotations, 1)

    def forward(self, emb, mask, h0=None):
        return self._run(emb, mask, h0)[-1]

    def recurrence_cells(self):
        return {"future": self.future, "context-lower": self.lower, "context-upper": self.upper}

    def recurrences(self, emb, mask, h0=None):
        future, xp_lower, xp_upper, history, annotations = self._run(emb, mask, h0)
        return {"future": Recurrence(self.future, self.future.input_proj(emb),
                                     earlier_states(future, reverse=not self.context_reverse, h0=h0)),
                "context-lower": Recurrence(self.lower, xp_lower,
                                            earlier_states(annotations, reverse=self.context_reverse, h0=h0)),
                "context-upper": Recurrence(self.upper, xp_upper, history)}


@ENCODERS.register("fcae")
class ForwardContextAwareEncoder(ContextAwareEncoder):
    """Context-aware layer left → right, future context right → left."""

    words = "context-aware encoder (left to right, with the future context right to left)"

    context_reverse = False


@ENCODERS.register("bcae")
class BackwardContextAwareEncoder(ContextAwareEncoder):
    """Context-aware layer right → left, future context left → right (the released code)."""

    words = "context-aware encoder (right to left, with the future context left to right)"

    context_reverse = True
