"""int8 products (decoding.precision int8, ctxnmt/models/int8.py): the products equal the
dynamic-quantisation equation written out here; every shipped architecture searches with
no float32 matrix product left outside attention's weighted sums; nothing changes outside
the context or under autograd."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ctxnmt.config import load_config
from ctxnmt.data.batching import pad, pad_context
from ctxnmt.decoding.beam import _Search
from ctxnmt.decoding.forced import forced_log_probs
from ctxnmt.data.words import WordBoundaries
from ctxnmt.decoding.length import length_control
from ctxnmt.models import int8
from ctxnmt.models.context import context_sentences, reads_target_context
from ctxnmt.models.functional import step_log_softmax, step_product, top_log_softmax, top_log_softmax_and_word
from ctxnmt.models.nmt import build_model
from tests.models.test_shipped_configs import CONFIGS, SRC, TGT, VOCAB, _shrunk


def reference(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """x Wᵀ + b with W quantised per row, w_q = round(w / s_w), s_w = max|w_row| / 127, and x
    quantised as a whole to n bits (8 through oneDNN, 7 through fbgemm), q = 2ⁿ − 1,
    x_q = clamp(round(x / s_x) + z, 0, q) with s_x = (max(x, 0) − min(x, 0)) / q and
    z = round(−min(x, 0) / s_x):  y = s_x s_w (x_q − z) w_qᵀ + b."""
    q = 2 ** int8.INPUT_BITS - 1
    s_w = W.abs().amax(1) / 127
    w_q = torch.round(W / s_w[:, None])
    lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
    s_x = (hi - lo) / q
    z = round(-lo / s_x)
    x_q = torch.clamp(torch.round(x / s_x) + z, 0, q)
    y = s_x * ((x_q - z) @ w_q.t()) * s_w
    return y if b is None else y + b


@torch.no_grad()
def test_an_int8_linear_is_the_dynamic_quantisation_equation():
    torch.manual_seed(0)
    W, b, x = torch.randn(7, 5), torch.randn(7), torch.randn(2, 3, 5) * 2 + 0.3
    layer = torch.nn.Linear(5, 7)
    layer.weight.copy_(W), layer.bias.copy_(b)
    with int8.int8_products():
        y = layer(x)  # every nn.Linear of every component
        assert torch.equal(int8.any_linear(x, W, b), y)  # and the products formed outside modules
    assert torch.equal(layer(x), F.linear(x, W, b))  # outside the context: float32 again
    assert y.shape == (2, 3, 7)
    assert torch.allclose(y.view(6, 7), reference(x.view(6, 5), W, b), atol=1e-5)
    assert (y - F.linear(x, W, b)).abs().max() > 1e-3  # not the float32 product


@torch.no_grad()
def test_the_step_products_and_the_output_layer_are_int8_inside_the_context():
    torch.manual_seed(1)
    h, U = torch.rand(20, 6) - 0.5, torch.randn(6, 9)
    stacked, hs = torch.randn(2, 6, 9), torch.rand(2, 20, 6) - 0.5
    W, b = torch.randn(30, 6), torch.randn(30)
    with int8.int8_products():
        product, both = step_product(h, U), step_product(hs, stacked)
        logp = step_log_softmax(h, W, b)
        top, ids = top_log_softmax(h, W, b, 3)  # the row-major kernel reading the int8 logits
        few, few_ids = top_log_softmax(h[:3], W, b, 3)  # as few rows as a document's last sentence
    assert torch.allclose(product, reference(h, U.t(), None), atol=1e-5)
    for d in range(2):
        assert torch.allclose(both[d], reference(hs[d], stacked[d].t(), None), atol=1e-5)
    expected = torch.log_softmax(reference(h, W, b), dim=-1)
    assert torch.allclose(logp, expected, atol=1e-5)
    best, best_ids = expected.topk(3, dim=-1)
    assert torch.allclose(top, best, atol=1e-5) and torch.equal(ids, best_ids)
    best, best_ids = torch.log_softmax(reference(h[:3], W, b), dim=-1).topk(3, dim=-1)  # the input's own scale
    assert torch.allclose(few, best, atol=1e-5) and torch.equal(few_ids, best_ids)


@torch.no_grad()
@pytest.mark.parametrize("rows", [3, 20])
def test_a_length_ratio_priors_step_reads_every_rows_end_word_from_the_int8_logits(rows):
    """The top k and one word's log-probability of each row, whatever its rank: in int8 the
    row kernel's log Z gives the word's log softmax(y)_w = y_w − log Σ_v exp(y_v) with y the
    quantised product; in float32 (the packed product into the same kernel, for any number of
    rows) `step_log_softmax`'s entries, to float32's rounding."""
    torch.manual_seed(4)
    h, W, b = torch.rand(rows, 6) - 0.5, torch.randn(30, 6), torch.randn(30)
    b[2] = -8.0  # the word falls outside every row's top k
    with int8.int8_products():
        top, ids, word = top_log_softmax_and_word(h, W, b, 3, 2)
    expected = torch.log_softmax(reference(h, W, b), dim=-1)
    best, best_ids = expected.topk(3, dim=-1)
    assert torch.allclose(top, best, atol=1e-5) and torch.equal(ids, best_ids)
    assert not (ids == 2).any() and torch.allclose(word, expected[:, 2], atol=1e-5)
    top, ids, word = top_log_softmax_and_word(h[:3], W, b, 3, 2)
    logp = step_log_softmax(h[:3], W, b)
    assert torch.allclose(word, logp[:, 2], atol=1e-5) and torch.allclose(top, logp.topk(3, dim=-1)[0], atol=1e-5)


@torch.no_grad()
def test_a_product_of_fewer_multiply_adds_than_int8_from_stays_float32():
    """decoding.int8_from: a product of rows × in × out multiply-adds per matrix (each of a
    stack's n matrices its own rows) runs in int8 from that many on, in float32 below."""
    torch.manual_seed(5)
    x, W, b = torch.randn(4, 6) - 0.2, torch.randn(9, 6), torch.randn(9)
    macs = 4 * 6 * 9
    h, U = torch.rand(2, 4, 6) - 0.5, torch.randn(2, 6, 9)  # per matrix: 4 rows × 6 × 9
    layer = torch.nn.Linear(6, 9)
    layer.weight.copy_(W), layer.bias.copy_(b)
    with int8.int8_products(macs):
        assert int8.int8_from() == macs and int8.serves(x, W) and int8.serves(h, U)
        assert torch.allclose(layer(x), reference(x, W, b), atol=1e-5)
        assert torch.allclose(step_product(h, U)[1], reference(h[1], U[1].t(), None), atol=1e-5)
    with int8.int8_products(macs + 1):
        assert not int8.serves(x, W) and not int8.serves(h, U)
        assert torch.equal(layer(x), F.linear(x, W, b))
        assert torch.equal(step_product(h, U), torch.matmul(h, U))
    assert int8.int8_from() == 0 and not int8.active()


def test_search_takes_int8_from_from_the_decoding_section():
    import dataclasses

    from ctxnmt.decoding.settings import DecodingConfig
    from ctxnmt.decoding.translator import search_precision

    assert DecodingConfig().int8_from == 1_000_000
    with search_precision(dataclasses.replace(DecodingConfig(), precision="int8", int8_from=123), "cpu"):
        assert int8.active() and int8.int8_from() == 123
    assert not int8.active()
    with pytest.raises(Exception, match=r"decoding.int8_from must be 0 or more, got -1"):
        load_config(None, ["decoding.int8_from=-1"])


def test_outside_the_context_and_under_autograd_products_stay_float32():
    torch.manual_seed(2)
    W, b, x = torch.randn(7, 5, requires_grad=True), torch.randn(7), torch.randn(3, 5)
    exact = x @ W.detach().t() + b
    with torch.no_grad():
        assert torch.equal(F.linear(x, W, b), exact)
    with int8.int8_products():  # training under the context: autograd needs the float32 product
        y = F.linear(x, W, b)
        y.sum().backward()
    assert torch.allclose(y, exact) and W.grad is not None
    assert not int8.active()


@torch.no_grad()
def test_a_weight_or_bias_changed_in_place_or_replaced_is_quantised_again():
    torch.manual_seed(3)
    W, x, b = torch.randn(4, 5), torch.randn(2, 5), torch.randn(4)
    with int8.int8_products():
        first = int8.any_linear(x, W)
        W.mul_(2)
        second = int8.any_linear(x, W)
        with_bias = int8.any_linear(x, W, b)
        b.add_(1)
        bias_changed = int8.any_linear(x, W, b)
        other = torch.zeros(4)
        bias_replaced = int8.any_linear(x, W, other)
        no_bias = int8.any_linear(x, W)
    assert torch.allclose(second, reference(x, W, None), atol=1e-5)
    assert not torch.allclose(first, second)
    assert torch.allclose(with_bias, second + b - 1, atol=1e-5)
    assert torch.allclose(bias_changed, second + b, atol=1e-5)
    assert torch.equal(bias_replaced, no_bias) and torch.allclose(no_bias, second, atol=1e-5)


class FloatProducts(TorchDispatchMode):
    """Counts the float32 matrix products (mm, addmm, matmul on 2-D operands) that run."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _model_and_context(path: Path):
    torch.manual_seed(0)
    config = load_config(path)
    model = build_model(_shrunk(config.model), VOCAB, VOCAB).eval()
    k = context_sentences(config.model)
    targets = [[[11, 2]], [[12, 2], [13, 14, 2]]] if reads_target_context(config.model) else None
    context = pad_context([[[5, 6]], [[7], [8, 9]]], k, targets=targets) if k else None
    return config, model, context


@pytest.mark.parametrize("path", [p for p in CONFIGS if not p.name.startswith("lm-")], ids=lambda p: p.name)
@torch.no_grad()
def test_every_shipped_architecture_searches_with_int8_products_alone(path):
    """Encoding and two beam steps under int8 run no float32 matrix product (attention's
    weighted sums are batched products of activations, bmm, and stay float32), and the
    step's scores stay near float32's."""
    config, model, context = _model_and_context(path)
    src, src_mask = pad(SRC)
    words = WordBoundaries(torch.zeros(VOCAB, dtype=torch.bool), torch.zeros(VOCAB, dtype=torch.bool))
    scores = {}
    for precision in ("fp32", "int8"):
        search = _Search(model, config.decoding.beam, length_control(config.decoding, None, words=words), True)
        with FloatProducts() as products, (int8.int8_products() if precision == "int8" else torch.no_grad()):
            part = search.advance(search.start([0, 1], src, src_mask, context))
            part = search.advance(part)
        scores[precision] = part.scores
        if precision == "int8":
            assert products.count == 0, f"{products.count} float32 matrix products ran under int8"
        else:
            assert products.count > 0
    finite = torch.isfinite(scores["fp32"])
    assert torch.equal(finite, torch.isfinite(scores["int8"]))
    assert torch.allclose(scores["int8"][finite], scores["fp32"][finite], atol=0.05)


@torch.no_grad()
def test_forced_scores_under_int8_are_near_float32():
    config, model, context = _model_and_context(CONFIGS[0])
    fp32 = forced_log_probs(model, SRC, TGT)
    with int8.int8_products():
        quantised = forced_log_probs(model, SRC, TGT)
    for a, b in zip(fp32, quantised):
        assert a.shape == b.shape and abs(a - b).max() < 0.05 and abs(a - b).max() > 0
