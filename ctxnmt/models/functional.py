"""The fast paths, in one place: what the model files call where an equation has a
faster form than its plain PyTorch expression.

The contract: every function here computes exactly its equation (named in its
docstring); where it cannot serve its inputs (another device or dtype, autograd
where it has no backward, the kernels unavailable) it runs the plain PyTorch
expression itself, so callers never choose.  Tests compare each with the plain
operations, gradients included.  A model that calls plain PyTorch instead gets the
same numbers, more slowly.  docs/speed.md lists them; docs/speed-log.md has what
each gained.

  mix(α, v)                 Σ_i α_ti v_i over values shared by a sentence's rows
  step_product(h, U)        h U for a matrix read at every step (packed once for oneDNN
                            in search on the CPU: ctxnmt.models.packed)
  read_every_step(x)        marks x as read by every step of a loop: its gradient is
                            formed once for all steps, and under autocast it is cast
                            once, not at every step (read_each_every_step: a State)
  cast_once(x)              x in autocast's precision, cast here rather than per step
  additive_energy(k, q, v)  vᵀ tanh(k_i + q)
  gru_gates(xp, hp, h)      the dl4mt GRU's gate arithmetic (cells.GRUCell): a fused kernel
                            on CPU (kernels.cpp) and on CUDA (PyTorch's fused GRU cell)
  hold_on_padding           a recurrence's state kept where a step is padding
  biscan(fwd, bwd, …)       both directions of a recurrence in one loop
  bigru(x, …)               both directions of a dl4mt GRU over a padded batch, through
                            torch's GRU (cuDNN) on CUDA
  linear_cross_entropy      Σ cross-entropy of softmax(x Wᵀ + b), chunked, gradient in the forward pass
  step_log_softmax          log softmax(x Wᵀ + b) for one search step
  top_log_softmax           its k best entries per row
  WordTable                 a function of the embeddings, looked up per word in search
"""
from __future__ import annotations

import functools
import os

import torch
from torch.nn import functional as F
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from ctxnmt.models import int8, kernels, packed
from ctxnmt.models.state import Kind

# The GPU paths (cast_once, the fused CUDA GRU gates, bigru through cuDNN).
# CTXNMT_GPU_FAST=0 switches them off, so that a benchmark can measure the code before
# them in the same run (benchmarks/speed.py --before); the CPU's float32 path never uses them.
GPU_PATHS = os.environ.get("CTXNMT_GPU_FAST", "1") != "0"

# Under CUDA autocast (bf16), run each backward under the autocast state of its forward.
_custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")
_custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="cuda")


def _cpu_autocast(*tensors: torch.Tensor) -> bool:
    """True under autocast on a device other than CUDA (the CPU's bf16/fp16 training).

    The functions here declare their autocast behaviour for CUDA only (one device type
    per custom_fwd), so on CPU their forward would run in autocast's precision and
    their backward in another; the plain operations, whose casts autograd records,
    serve instead, and the loss keeps float32 by its own cast."""
    return any(t.device.type != "cuda" and torch.is_autocast_enabled(t.device.type) for t in tensors)


class _Mix(torch.autograd.Function):
    """out = Σ_i α_i v_i for α (N, K, S) and v (N, S, D).

    The generic bmm backward forms ∂v as a batch of rank-1 products (a bmm with
    inner size K = 1 during training), which CPU BLAS runs slowly; a broadcast
    multiply gives the same numbers.
    Values read at every decoder step (`read_every_step`) instead leave their
    factors (α, ∂out) with the values' `_StepBank`, which forms ∂v once."""

    @staticmethod
    @_custom_fwd
    def forward(ctx, alpha, values):
        ctx.save_for_backward(alpha, values)
        ctx.bank = getattr(values, "_step_bank", None)
        return torch.bmm(alpha, values)

    @staticmethod
    @_custom_bwd
    def backward(ctx, grad):
        alpha, values = ctx.saved_tensors
        grad_alpha = torch.bmm(grad, values.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        grad_values = None
        if ctx.needs_input_grad[1]:
            if ctx.bank is not None:
                ctx.bank.deposit(alpha, grad)
            elif alpha.size(1) == 1:
                grad_values = alpha.transpose(1, 2) * grad  # (N, S, 1) * (N, 1, D)
            else:
                grad_values = torch.bmm(alpha.transpose(1, 2), grad)
        return grad_alpha, grad_values


class _StepBank:
    """What every step's backward pass leaves for one tensor read at every step: the
    factors (a_t, g_t) of its gradient a_tᵀ g_t (the mix's α_t and ∂out_t, a recurrent
    product's h_t and ∂(h_t U)), and the energy kernel's running sum of ∂keys."""

    def __init__(self):
        self.a: list[torch.Tensor] = []  # the factors a_t and g_t of each step's gradient a_tᵀ g_t
        self.g: list[torch.Tensor] = []
        self.summed: torch.Tensor | None = None

    def deposit(self, a: torch.Tensor, g: torch.Tensor) -> None:
        self.a.append(a)
        self.g.append(g)

    def accumulator(self, like: torch.Tensor) -> torch.Tensor:
        """The running sum that kernels add their gradients into."""
        if self.summed is None:
            self.summed = torch.zeros_like(like)
        return self.summed

    def gradient(self) -> torch.Tensor | None:
        """The sum, with Σ_t a_tᵀ g_t as one product of inner size Σ_t rows_t (not T small
        products and T additions)."""
        total, self.summed = self.summed, None  # a second backward pass (retain_graph) deposits anew
        if self.a:
            a, g = torch.cat(self.a, dim=-2), torch.cat(self.g, dim=-2)
            self.a, self.g = [], []
            # Under CUDA autocast a step's factors can differ in precision; this runs outside it.
            dtype = torch.promote_types(a.dtype, g.dtype)
            mixed = torch.matmul(a.transpose(-1, -2).to(dtype), g.to(dtype))
            total = mixed if total is None else total.add_(mixed)
        return total


class _ReadEveryStep(torch.autograd.Function):
    """Identity whose backward pass runs after every step has deposited its factors
    (each step's node feeds this one) and hands the values their summed gradient.

    Per-step gradients (N, S, D) would otherwise be allocated and added one by one."""

    @staticmethod
    def forward(ctx, values, bank):
        ctx.bank = bank
        ctx.set_materialize_grads(False)
        return values.view_as(values)

    @staticmethod
    def backward(ctx, grad):
        banked = ctx.bank.gradient()
        if grad is None:
            return banked, None
        return (grad if banked is None else grad + banked), None


def cast_once(x: torch.Tensor) -> torch.Tensor:
    """x in autocast's precision (bf16, fp16) where autocast is on for x's device; x itself
    otherwise.  For tensors that every step of a loop reads: autocast casts the inputs of
    each product anew, caching only the casts of parameters, and a recurrent matrix Uᵀ or
    the stacked [W_d, U] is a tensor made from parameters, so it was cast (a 1024 × 3072
    copy and more) at every step and again in every step's backward pass.  Cast here, the
    products find it in their precision and autocast does nothing; its gradient flows
    back to the float32 parameters through this one cast."""
    if not (GPU_PATHS and x.is_floating_point() and torch.is_autocast_enabled(x.device.type)):
        return x
    dtype = torch.get_autocast_dtype(x.device.type)
    return x if x.dtype == dtype else x.to(dtype)


def read_every_step(values: torch.Tensor) -> torch.Tensor:
    """`values` as the steps of a loop should see them while training: values (N, S, D)
    for the decoder's `mix`, attention keys for the fused energy, a recurrent matrix for
    `step_product`.  The gradient of all steps is formed at once; under autocast, values
    are cast once (`cast_once`).  Outside autograd, values otherwise unchanged."""
    values = cast_once(values)
    if not (torch.is_grad_enabled() and values.requires_grad) or _cpu_autocast(values):
        return values
    bank = _StepBank()
    shared = _ReadEveryStep.apply(values, bank)
    # Read by _Mix, _FusedEnergy and _StepProduct; a tensor attribute survives no reindexing, as wanted.
    shared._step_bank = bank
    return shared


def read_each_every_step(state):
    """`read_every_step` for every entry of an encoder side (ctxnmt.models.state) that is
    not per row: the per-position values and the matrices that the steps share."""
    return state.replace(**{name: read_every_step(state[name]) for name in state if state.kind(name) is not Kind.ROW})


class _StepProduct(torch.autograd.Function):
    """h_t U for a matrix U read at every step (`read_every_step`): the backward pass forms
    ∂h_t and leaves (h_t, ∂out_t) with U's bank, which forms ∂U = Σ_t h_tᵀ ∂out_t as one
    product.  Per step, autograd would multiply with inner size B (the batch) and add a
    U-sized gradient into the sum."""

    @staticmethod
    @_custom_fwd
    def forward(ctx, h, U):
        ctx.save_for_backward(h, U)
        ctx.bank = U._step_bank
        return torch.matmul(h, U)

    @staticmethod
    @_custom_bwd
    def backward(ctx, grad):
        h, U = ctx.saved_tensors
        grad_h = torch.matmul(grad, U.transpose(-1, -2)) if ctx.needs_input_grad[0] else None
        if ctx.needs_input_grad[1]:
            ctx.bank.deposit(h, grad)
        return grad_h, None


def step_product(h: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
    """h @ U (batched where h and U are 3-D); U's gradient is formed once for all steps
    where U went through `read_every_step`; in int8 inside `int8.int8_products()`; in search on
    the CPU from `packed.PRODUCT_ROWS` rows, with U packed once (ctxnmt.models.packed)."""
    if int8.serves(h, U):
        return int8.product(h, U)
    if U.dim() == 2 and h.size(0) >= packed.PRODUCT_ROWS and packed.serves(h, U):
        return packed.product(h, U)
    if getattr(U, "_step_bank", None) is None:
        return torch.matmul(h, U)
    return _StepProduct.apply(h, U)


def mix(alpha: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Σ_i α_ti v_i for rows (R, S) of weights over values (N, S, D) shared by R/N rows each."""
    N, S, D = values.shape
    alpha = alpha.view(N, -1, S)
    if torch.is_grad_enabled() and (alpha.requires_grad or values.requires_grad) and not _cpu_autocast(values):
        return _Mix.apply(alpha, values).view(-1, D)
    return torch.bmm(alpha, values).view(-1, D)


class _LinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of softmax(x Wᵀ + b) against targets, in row chunks.

    The full (tokens × vocabulary) logits are never stored, and the gradient is
    formed in the forward pass, chunk by chunk, while each chunk's probabilities
    are at hand: the loss is a scalar, so its backward pass only scales what was
    formed by the incoming gradient.  Recomputing the logits in the backward pass
    instead would cost one more tokens × vocabulary product and softmax."""

    @staticmethod
    @functools.partial(torch.amp.custom_fwd, device_type="cuda", cast_inputs=torch.float32)  # softmax in fp32
    def forward(ctx, x, weight, bias, target, smoothing, chunk, rows_kept):
        total = x.new_zeros(())
        grad_x = torch.empty_like(x)
        grad_w = torch.zeros_like(weight)
        grad_b = torch.zeros_like(bias)
        chunk_step = _xent_chunk_fused if _fusable(x, weight, bias) else _xent_chunk
        for start in range(0, x.size(0), chunk):
            rows = slice(start, start + chunk)
            kept = None if rows_kept is None else rows_kept[rows]
            total += chunk_step(x[rows], target[rows], weight, bias, smoothing, grad_x[rows], grad_w, grad_b, kept)
        ctx.save_for_backward(grad_x, grad_w, grad_b)
        return total

    @staticmethod
    @_custom_bwd
    def backward(ctx, grad_out):
        grad_x, grad_w, grad_b = ctx.saved_tensors
        return grad_x * grad_out, grad_w * grad_out, grad_b * grad_out, None, None, None, None


def _xent_chunk(xs, ts, weight, bias, eps, grad_xs, grad_w, grad_b, kept=None) -> torch.Tensor:
    """One chunk's loss; writes its ∂x into grad_xs and adds its ∂W, ∂b.  `kept`: each
    row's weight (1 for a real token, 0 for padding), or None for all rows."""
    logp = torch.log_softmax(F.linear(xs, weight, bias), dim=-1)
    rows = torch.arange(ts.size(0), device=ts.device)
    # loss = −(1 − ε) log p_target − ε/V Σ_v log p_v  (F.cross_entropy's label smoothing)
    per_row = logp[rows, ts] * (1.0 - eps)
    if eps:
        per_row = per_row + logp.sum(1) * (eps / weight.size(0))
    loss = -(per_row if kept is None else per_row * kept).sum()
    # ∂loss/∂logits = softmax − ((1 − ε)·onehot + ε/V)
    g = logp.exp_()
    if eps:
        g -= eps / weight.size(0)
    g[rows, ts] -= 1.0 - eps
    if kept is not None:
        g *= kept.unsqueeze(1)
    torch.mm(g, weight, out=grad_xs)
    grad_w.addmm_(g.t(), xs)
    grad_b += g.sum(0)
    return loss


def _xent_chunk_fused(xs, ts, weight, bias, eps, grad_xs, grad_w, grad_b, kept=None) -> torch.Tensor:
    """_xent_chunk with the logits vocabulary-major, W xᵀ (the faster product order on
    CPU), and bias, softmax, loss and ∂logits in one kernel (kernels.cpp, softmax_xent_columns)."""
    g_t = torch.mm(weight, xs.t())  # the kernel adds the bias as it reads
    per_row = torch.ops.ctxnmt.softmax_xent_columns(g_t, bias, ts, eps)  # g_t now holds ∂loss/∂logitsᵀ
    if kept is not None:
        per_row = per_row * kept
        g_t *= kept
    loss = per_row.sum()
    torch.mm(g_t.t(), weight, out=grad_xs)
    grad_w.addmm_(g_t, xs)
    grad_b += g_t.sum(1)
    return loss


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, target: torch.Tensor,
                         label_smoothing: float = 0.0, chunk: int = 512,
                         rows_kept: torch.Tensor | None = None) -> torch.Tensor:
    """Σ_rows cross_entropy(x Wᵀ + b, target), each row weighted by `rows_kept` (N,) where
    given: 0 leaves out a padding row without changing the tensors' shapes (a CUDA graph
    needs fixed shapes, where indexing out the real rows would not have them)."""
    if _cpu_autocast(x):  # the loss and its softmax in float32 (CUDA: the forward's cast_inputs)
        with torch.autocast(x.device.type, enabled=False):
            return linear_cross_entropy(x.float(), weight.float(), bias.float(), target, label_smoothing, chunk,
                                        rows_kept)
    if not torch.is_grad_enabled():
        if rows_kept is None:
            return F.cross_entropy(F.linear(x, weight, bias), target, reduction="sum",
                                   label_smoothing=label_smoothing)
        return (F.cross_entropy(F.linear(x, weight, bias), target, reduction="none", label_smoothing=label_smoothing)
                * rows_kept).sum()
    return _LinearCrossEntropy.apply(x, weight, bias, target, label_smoothing, chunk, rows_kept)


class _AdditiveEnergy(torch.autograd.Function):
    """e_i = vᵀ tanh(k_i + q) for keys (N, S, A), queries (N, K, A), v (A,).

    Autograd would keep tanh(k_i + q), an (N, K, S, A) tensor, for every decoder
    step: the bulk of a training step's memory.  Here only q is kept per step
    and the tanh is recomputed in the backward pass (one extra element-wise
    pass, against hundreds of megabytes at the papers' sizes).

    The tanh is evaluated as tanh x = 2σ(2x) − 1, so e = 2 vᵀσ(2(k_i + q)) − Σ_a v_a
    and ∂e/∂x = 4 v ⊙ σ(1 − σ): the same function, rounded differently (absolute
    differences of a few 1e-8), because PyTorch's vectorised float32 sigmoid is
    faster than its tanh on CPU."""

    @staticmethod
    @_custom_fwd
    def forward(ctx, keys, query, v):
        ctx.save_for_backward(keys, query, v)
        return _energy_from_sigmoid(_doubled_sigmoid(keys, query), v)

    @staticmethod
    @_custom_bwd
    def backward(ctx, grad):  # grad: (N, K, S)
        keys, query, v = ctx.saved_tensors
        sig = _doubled_sigmoid(keys, query)
        grad_v = None
        if ctx.needs_input_grad[2]:  # Σ grad · (2σ − 1)
            grad_v = 2 * torch.einsum("nks,nksa->a", grad, sig) - grad.sum()
        # ∂e/∂pre = v ⊙ (1 − tanh²) = 4 v ⊙ σ(1 − σ), scaled by the incoming gradient
        grad_pre = sig.addcmul_(sig, sig, value=-1.0).mul_(4 * v).mul_(grad.unsqueeze(-1))
        grad_query = grad_pre.sum(2) if ctx.needs_input_grad[1] else None
        grad_keys = grad_pre.sum(1) if ctx.needs_input_grad[0] else None
        return grad_keys, grad_query, grad_v


def _doubled_sigmoid(keys: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """σ(2(k_i + q)) as (N, K, S, A), in two passes (the doubling is exact in floating point)."""
    return torch.add((2 * query).unsqueeze(2), keys.unsqueeze(1), alpha=2).sigmoid_()


def _energy_from_sigmoid(sig: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """vᵀ(2σ − 1) = 2 vᵀσ − Σ v."""
    return (sig @ v).mul_(2).sub_(v.sum())


def additive_energy(keys: torch.Tensor, query: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """vᵀ tanh(k_i + q) as (N, K, S) for keys (N, S, A), queries (N, K, A) and v (A,).  With
    `mask` (N, S), positions where it is 0 may be left uncomputed (their value is arbitrary:
    the caller masks them, so they also get no gradient): the fused kernel skips them."""
    if _cpu_autocast(keys, query):
        return _energy_from_sigmoid(_doubled_sigmoid(keys, query), v)  # autograd keeps (N, K, S, A)
    if _fusable(keys, query, v):
        query = query.contiguous()
        skip = mask.contiguous() if mask is not None and mask.dtype == torch.float32 else None
        if torch.is_grad_enabled() and (keys.requires_grad or query.requires_grad or v.requires_grad):
            return _FusedEnergy.apply(keys, query, v, skip)
        return torch.ops.ctxnmt.additive_energy(keys.contiguous(), query, v.contiguous(), skip)
    if torch.is_grad_enabled() and (keys.requires_grad or query.requires_grad or v.requires_grad):
        return _AdditiveEnergy.apply(keys, query, v)
    return _energy_from_sigmoid(_doubled_sigmoid(keys, query), v)  # nothing is kept for a backward pass


class WordTable:
    """A function f of the embeddings, looked up per word in search: a per-word table f(E)
    (V, F) turns a product with inner size emb_dim, which CPU BLAS runs slowly, into a row
    lookup per step.  Formed again whenever the embeddings or the function's parameters
    change in place (an optimiser step, a checkpoint load: each changes a tensor's storage
    or version counter) and when the autocast precision or int8 products change.  Where autograd records
    (a table would hold a graph) or the table would pass `limit` entries (the papers'
    30k × 3072 would take 370 MB), f of the rows themselves."""

    def __init__(self, limit: int = 1 << 26):
        self.limit = limit
        self.key: list | None = None
        self.table: torch.Tensor | None = None

    def lookup(self, form, embeddings: torch.Tensor, parameters: list[torch.Tensor], ids: torch.Tensor,
               rows: torch.Tensor) -> torch.Tensor:
        """f(E)[ids]; `rows` are E[ids], the embeddings of `ids`."""
        if torch.is_grad_enabled():
            return form(rows)
        device = embeddings.device.type  # a table formed under autocast holds its rounding
        precision = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        key = [precision, int8.active(), int8.int8_from(),
               *((t.data_ptr(), t._version) for t in (embeddings, *parameters))]
        if self.key != key:
            words, width = embeddings.size(0), form(embeddings[:1]).size(-1)
            self.key, self.table = key, form(embeddings) if words * width <= self.limit else None
        return form(rows) if self.table is None else self.table.index_select(0, ids)


# -- the fused CPU kernels (ctxnmt/models/kernels.cpp) ---------------------------------------

def _fusable(*tensors: torch.Tensor) -> bool:
    """The fused kernels serve float32 CPU tensors; GPUs, float64 (gradcheck) and builds
    without the kernels take the PyTorch path."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors) and kernels.available()


class _FusedEnergy(torch.autograd.Function):
    """additive_energy in one pass per direction; nothing of size (N, K, S, A) is formed.
    Keys read at every step (`read_every_step`) take their gradient as a running sum."""

    @staticmethod
    def forward(ctx, keys, query, v, mask=None):
        ctx.bank = getattr(keys, "_step_bank", None)
        keys, v = keys.contiguous(), v.contiguous()
        ctx.save_for_backward(keys, query, v)
        return torch.ops.ctxnmt.additive_energy(keys, query, v, mask)

    @staticmethod
    def backward(ctx, grad):
        keys, query, v = ctx.saved_tensors
        banked = ctx.bank is not None and ctx.needs_input_grad[0]
        grad_keys = ctx.bank.accumulator(keys) if banked else torch.zeros_like(keys)
        grad_query, grad_v = torch.ops.ctxnmt.additive_energy_backward(grad.contiguous(), keys, query, v, grad_keys)
        return (None if banked else grad_keys), grad_query, grad_v, None


def _rows(x: torch.Tensor) -> torch.Tensor:
    """(…, W) as (rows, W), a view where the strides allow it."""
    x = x.reshape(-1, x.size(-1))
    return x if x.stride(-1) == 1 else x.contiguous()


class _FusedGRUGates(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xp, hp, h, mask):
        out, saved = torch.ops.ctxnmt.gru_gates(_rows(xp), _rows(hp), _rows(h), mask, True)
        ctx.save_for_backward(saved, h, mask)
        return out.view(h.shape)

    @staticmethod
    def backward(ctx, grad):
        saved, h, mask = ctx.saved_tensors
        grad_xp, grad_hp, grad_h = torch.ops.ctxnmt.gru_gates_backward(_rows(grad), saved, _rows(h), mask)
        lead = h.shape[:-1]
        return grad_xp.view(*lead, -1), grad_hp.view(*lead, -1), grad_h.view(h.shape), None


def gru_gates(xp: torch.Tensor, hp: torch.Tensor, h: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The dl4mt GRU's gate arithmetic (`plain_gru_gates`, cells.GRUCell), with the state held
    where `mask` (rows of h; 1 for real tokens) is 0: one fused kernel on CPU (kernels.cpp)
    and on CUDA (PyTorch's fused GRU cell); the PyTorch expression where neither serves these
    tensors (other dtypes, CPU autocast, a mask that needs a gradient)."""
    fused = _fused_gru_gates(xp, hp, h, mask)
    if fused is not None:
        return fused
    new = plain_gru_gates(xp, hp, h)
    return new if mask is None else hold_on_padding(new, h, mask)


def plain_gru_gates(xp: torch.Tensor, hp: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """r = σ(x_r + h_r), z = σ(x_z + h_z), h̃ = tanh(x_h + r ⊙ h_h), h' = z ⊙ h + (1 − z) ⊙ h̃
    for the input terms xp = W x + b and recurrent terms hp = U h, each [r; z; h̃]."""
    x_r, x_z, x_h = xp.chunk(3, dim=-1)
    h_r, h_z, h_h = hp.chunk(3, dim=-1)
    r = torch.sigmoid(x_r + h_r)
    z = torch.sigmoid(x_z + h_z)
    candidate = torch.tanh(x_h + r * h_h)
    return candidate + z * (h - candidate)


def hold_on_padding(h_new: torch.Tensor, h_old: torch.Tensor, mask_t: torch.Tensor) -> torch.Tensor:
    """Keep the previous state where the step is padding (mask_t is 1 for real tokens)."""
    return h_old + mask_t.unsqueeze(-1) * (h_new - h_old)


def biscan(fwd, bwd, xp_f: torch.Tensor, xp_b: torch.Tensor, h0: torch.Tensor,
           mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both directions of a recurrence (two cells of one class, cells.RecurrentCell) in one
    loop: at step t the forward cell reads position t and the backward cell position T−1−t,
    stacked so each step is one batched matmul and one set of element-wise kernels instead
    of two.  xp_f, xp_b: each direction's input projection (B, T, G·H)."""
    assert type(fwd) is type(bwd)
    return _stacked_scan(fwd.combine_held, torch.stack([fwd.hidden_weight(), bwd.hidden_weight()]), xp_f, xp_b,
                         h0, mask)


def _stacked_scan(combine_held, U: torch.Tensor, xp_f: torch.Tensor, xp_b: torch.Tensor, h0: torch.Tensor,
                  mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """biscan's loop for the gate arithmetic `combine_held` and the stacked recurrent matrices U (2, H, G·H)."""
    U = read_every_step(U)
    xp = torch.stack([xp_f, xp_b.flip(1)])  # (2, B, T, G·H)
    m = torch.stack([mask, mask.flip(1)])  # (2, B, T)
    h = h0.expand(2, *h0.shape) if h0.dim() == 2 else h0
    out = []
    for x_t, m_t in zip(xp.unbind(2), m.unbind(2)):  # unbind: see cells.scan()
        h = combine_held(x_t, step_product(h, U), h, m_t)
        out.append(h)
    states = torch.stack(out, dim=2)  # (2, B, T, H)
    return states[0], states[1].flip(1)


def _fused_gru_gates(xp, hp, h, mask):
    """gru_gates by a fused kernel, or None where none serves these tensors."""
    if mask is not None and mask.requires_grad:
        return None
    if xp.device.type == "cuda":
        return _cuda_gru_gates(xp, hp, h, mask)
    if not _fusable(xp, hp, h) or _cpu_autocast(h):
        return None
    rows_mask = None if mask is None else mask.to(torch.float32).reshape(-1)
    if torch.is_grad_enabled() and (xp.requires_grad or hp.requires_grad or h.requires_grad):
        return _FusedGRUGates.apply(xp, hp, h, rows_mask)
    out, _ = torch.ops.ctxnmt.gru_gates(_rows(xp), _rows(hp), _rows(h), rows_mask, False)
    return out.view(h.shape)


def step_log_softmax(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """log softmax(x Wᵀ + b) (R, V) for the R rows of one search step.  On CPU without
    autograd, through the packed product (ctxnmt.models.packed); where that is missing, for
    fewer than 256 rows, vocabulary-major (W xᵀ, which CPU BLAS forms faster at these shapes:
    benchmarks/logits_layout.py) and transposed back.  In int8 inside `int8.int8_products()`."""
    if int8.serves(x, weight):
        return torch.log_softmax(int8.linear(x, weight, bias), dim=-1)
    if packed.serves(x, weight):
        return torch.log_softmax(packed.linear(x, weight, bias), dim=-1)
    if torch.is_grad_enabled() or x.size(0) >= 256 or x.device.type != "cpu":
        return torch.log_softmax(F.linear(x, weight, bias), dim=-1)
    logits_t = torch.addmm(bias.unsqueeze(1), weight, x.t())
    return torch.log_softmax(logits_t.t().contiguous(), dim=-1)


def top_log_softmax(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, k: int):
    """The k largest entries of each row of log_softmax(x Wᵀ + b) and their columns, best
    first.  On CPU without autograd, a kernel reads the row-major logits of the packed product
    (ctxnmt.models.packed; in int8 inside `int8.int8_products()`, of the int8 product) as they
    come, for any number of rows.  Without the packed product, from 16 rows a kernel of the same
    arithmetic reads the vocabulary-major product (one task per 16 rows).  Else, and under
    autograd or on other devices or dtypes, `step_log_softmax` then topk."""
    return _top_and_entries(x, weight, bias, k)[0]


def top_log_softmax_and_word(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, k: int, word: int):
    """`top_log_softmax`, and each row's log-probability of `word` (R,) whatever its rank: what a
    length-ratio prior reads of </s>.  Where a kernel serves, its log Z gives the word's entry
    from the word's logit, (l_w + b_w) − log Z, so that no (R, V) log-softmax is formed; else
    `step_log_softmax`'s column."""
    (values, ids), entry = _top_and_entries(x, weight, bias, k)
    return values, ids, entry(word)


def _top_and_entries(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, k: int):
    """`top_log_softmax`'s (values, ids), and a function giving any word's entry of each row."""
    row_major = int8.linear if int8.serves(x, weight) else packed.linear if packed.serves(x, weight) else None
    if row_major is not None and _fusable(x, weight, bias):
        logits = row_major(x, weight)
        values, ids, log_z = torch.ops.ctxnmt.row_log_softmax_topk(logits, bias.contiguous(), k)
        return (values, ids), lambda word: (logits[:, word] + bias[word]) - log_z
    if x.size(0) < 16 or torch.is_grad_enabled() or not _fusable(x, weight, bias):
        logp = step_log_softmax(x, weight, bias)
        return logp.topk(k, dim=-1), lambda word: logp[:, word]
    logits_t = torch.mm(weight, x.t())
    values, ids, log_z = torch.ops.ctxnmt.log_softmax_topk(logits_t, bias.contiguous(), k)  # the kernel adds b
    return (values, ids), lambda word: (logits_t[word] + bias[word]) - log_z


# -- the GPU paths: fewer kernel launches per step on CUDA -------------------------

def _cuda_gru_gates(xp, hp, h, mask):
    """gru_gates on CUDA through aten's _thnn_fused_gru_cell, the kernel behind
    torch.nn.GRUCell: r = σ(x_r + h_r), z = σ(x_z + h_z), h̃ = tanh(x_h + r ⊙ h_h),
    h' = h̃ + z ⊙ (h − h̃) (gates in the order r, z, h̃, as here), with its own backward
    kernel: one launch each way instead of about ten forward and twenty backward.  It
    takes 2-D tensors of one dtype: autocast's, or float32 under an autocast dtype this
    build's kernel lacks."""
    if not GPU_PATHS:
        return None
    dtype = _gates_dtype(xp, hp, h)
    if not _cuda_cell_serves(dtype):
        if not (torch.is_autocast_enabled("cuda") and _cuda_cell_serves(torch.float32)):
            return None
        dtype = torch.float32
    with torch.autocast("cuda", enabled=False):
        out = torch.ops.aten._thnn_fused_gru_cell(_rows(xp).to(dtype), _rows(hp).to(dtype), _rows(h).to(dtype))[0]
    out = out.view(h.shape)
    if mask is None:
        return out
    held = mask.to(out.dtype).reshape(*h.shape[:-1], 1)
    return h + held * (out - h)  # hold_on_padding, in the dtype of out


def _gates_dtype(*tensors: torch.Tensor) -> torch.dtype | None:
    """The dtype the fused cell would run in: autocast's where it is on, else the tensors'
    common dtype (None if they differ)."""
    if torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    dtypes = {t.dtype for t in tensors}
    return dtypes.pop() if len(dtypes) == 1 else None


@functools.lru_cache(maxsize=None)
def _cuda_cell_serves(dtype: torch.dtype | None) -> bool:
    """Whether this PyTorch build's fused CUDA GRU cell runs in `dtype` (bfloat16 came to it
    later than float16): asked once per dtype with a one-row call."""
    if dtype is None:
        return False
    try:
        with torch.autocast("cuda", enabled=False), torch.no_grad():
            one = torch.zeros(1, 3, dtype=dtype, device="cuda")
            torch.ops.aten._thnn_fused_gru_cell(one, one, torch.zeros(1, 1, dtype=dtype, device="cuda"))
        return True
    except (RuntimeError, NotImplementedError):
        return False


def bigru(x: torch.Tensor, forward: tuple, backward: tuple, h0: torch.Tensor | None, mask: torch.Tensor):
    """Both directions of the dl4mt GRU (cells.GRUCell) over x (B, S, I), each started at
    h0 (B, H; None: zeros) and holding its state on padding, as `biscan` computes them from the
    input projections: (forward states, backward states), each (B, S, H).  `forward` and
    `backward` are each direction's (W, b, U) as stored by GRUCell (W: (3H, I), U: (3H, H)).

    On CUDA, one call of torch's GRU (cuDNN) over the packed batch: its GRU is this one
    (reset gate applied to U h, gates in the order r, z, h̃) with its recurrent bias at
    zero.  Elsewhere (the fused CPU kernels serve the CPU), with the fast paths off, or for
    a mask that is not a prefix of real tokens (at least one) per row: `biscan` with
    `gru_gates`.  The lengths come to the host once per batch (one synchronisation)."""
    capturing = x.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    if GPU_PATHS and capturing and _cudnn_in_graphs:
        return padded_bigru(x, forward, backward, h0, mask)  # a CUDA graph can hold no host transfer
    lengths = _prefix_lengths(mask) if GPU_PATHS and x.device.type == "cuda" and not capturing else None
    if lengths is not None:
        return packed_bigru(x, forward, backward, h0, mask, lengths)
    (W_f, b_f, U_f), (W_b, b_b, U_b) = forward, backward
    if h0 is None:
        h0 = x.new_zeros(x.size(0), U_f.size(1))
    U = packed.kept((U_f, U_b), "_stacked_t", lambda: torch.stack([U_f.t(), U_b.t()]))
    return _stacked_scan(gru_gates, U, int8.any_linear(x, W_f, b_f),
                         int8.any_linear(x, W_b, b_b), h0, mask)


_cudnn_in_graphs = True


def cudnn_in_graphs(on: bool) -> None:
    """Whether a CUDA graph captures the encoder's bi-GRU through cuDNN (padded_bigru) or as
    biscan's loop: ctxnmt.training.graphs switches to the loop if a capture with cuDNN fails."""
    global _cudnn_in_graphs
    _cudnn_in_graphs = on


def _prefix_lengths(mask: torch.Tensor) -> torch.Tensor | None:
    """Each row's number of real tokens (on the host), if every row is real tokens then
    padding, with at least one real token; else None.  One transfer to the host."""
    lengths = mask.sum(1).long()
    prefix = (mask != 0) == (torch.arange(mask.size(1), device=mask.device) < lengths.unsqueeze(1))
    host = torch.cat([lengths, prefix.all().long().view(1)]).cpu()
    lengths, ok = host[:-1], bool(host[-1])
    return lengths if ok and bool((lengths > 0).all()) else None


def _recurrence_dtype(x: torch.Tensor) -> torch.dtype:
    """The precision of the encoder's cuDNN recurrence (see packed_bigru)."""
    kind = x.device.type
    fp16 = torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == torch.float16
    return torch.float16 if fp16 else x.dtype


def _torch_gru_params(direction: tuple, dtype: torch.dtype) -> list[torch.Tensor]:
    """A GRUCell's stored (W, b, U) in torch's order: w_ih, w_hh, b_ih, b_hh (zero: dl4mt has no U bias)."""
    W, b, U = direction
    return [W.to(dtype), U.to(dtype), b.to(dtype), b.new_zeros(b.shape, dtype=dtype)]


def padded_bigru(x, forward, backward, h0, mask):
    """bigru's computation for a prefix mask with at least one real token per row, with
    nothing sent to the host, so that a CUDA graph can hold it (ctxnmt.training.graphs).
    The forward direction runs over the padded rows: padding follows each row's tokens and
    changes none of their states.  The backward direction runs over each row's tokens
    reversed in place (padding still last) and is reversed back.  Padding reads as in
    biscan: the forward direction's final state, the backward direction's h0."""
    B, S, _ = x.shape
    dtype = _recurrence_dtype(x)
    if h0 is None:
        h0 = x.new_zeros(B, forward[2].size(1))
    lengths = mask.sum(1).long().unsqueeze(1)  # (B, 1)
    positions = torch.arange(S, device=x.device).unsqueeze(0)
    real = positions < lengths  # (B, S)
    # Position t of a row's reversed tokens reads position length − 1 − t; padding stays in place.
    reverse = torch.where(real, lengths - 1 - positions, positions)
    hx = h0.to(dtype).unsqueeze(0).contiguous()
    runs = []
    for direction, inputs in ((forward, x), (backward, x.gather(1, reverse.unsqueeze(-1).expand_as(x)))):
        with torch.autocast(x.device.type, enabled=False):
            out, _ = torch._VF.gru(inputs.to(dtype), hx, _torch_gru_params(direction, dtype), True, 1, 0.0,
                                   torch.is_grad_enabled(), False, True)
        runs.append(out)
    states_f, reversed_b = runs
    states_b = reversed_b.gather(1, reverse.unsqueeze(-1).expand_as(reversed_b))
    last = states_f.gather(1, (lengths - 1).unsqueeze(-1).expand(B, 1, states_f.size(-1)))
    real = real.unsqueeze(-1)
    return torch.where(real, states_f, last), torch.where(real, states_b, h0.to(dtype).unsqueeze(1))


def packed_bigru(x, forward, backward, h0, mask, lengths):
    """bigru's computation on any device, given the host `lengths` of a prefix mask.  The
    packed GRU stops each row at its length, so the forward direction's states on padding
    are its final state and the backward direction's are h0, which biscan's held state
    would have been; they are filled in, so padding reads the same as there.

    The recurrence runs in x's precision, float16 under fp16 autocast, and float32 under
    bf16 autocast: cuDNN's RNN serves float32 and float16, and PyTorch versions differ on
    whether bfloat16 reaches it or a per-step loop; the encoder's products are a small
    share of a training step, and its annotations are cast once where the decoder reads them."""
    kind = x.device.type
    dtype = _recurrence_dtype(x)
    if h0 is None:
        h0 = x.new_zeros(x.size(0), forward[2].size(1))
    params = _torch_gru_params(forward, dtype) + _torch_gru_params(backward, dtype)
    packed = pack_padded_sequence(x.to(dtype), lengths, batch_first=True, enforce_sorted=False)
    hx = h0.to(dtype).unsqueeze(0).expand(2, *h0.shape).index_select(1, packed.sorted_indices)
    with torch.autocast(kind, enabled=False):  # the precision chosen above, not autocast's
        out, h_n = torch._VF.gru(packed.data, packed.batch_sizes, hx.contiguous(), params, True, 1, 0.0,
                                 torch.is_grad_enabled(), True)
    states, _ = pad_packed_sequence(PackedSequence(out, packed.batch_sizes, packed.sorted_indices,
                                                   packed.unsorted_indices), batch_first=True, total_length=x.size(1))
    H = h0.size(-1)
    real = (mask != 0).unsqueeze(-1)
    last = h_n[0].index_select(0, packed.unsorted_indices).unsqueeze(1)
    return (torch.where(real, states[..., :H], last),
            torch.where(real, states[..., H:], h0.to(dtype).unsqueeze(1)))
