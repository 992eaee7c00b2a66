"""The packed float32 products of a search step (ctxnmt.models.packed) against the plain
equations y = x Wᵀ + b and h U, in float64."""
import pytest
import torch

from ctxnmt.models import packed
from ctxnmt.models.functional import step_log_softmax, step_product, top_log_softmax

pytestmark = pytest.mark.skipif(not packed.AVAILABLE, reason="this torch has no oneDNN linear")


def exact(x, W, b=None):
    y = x.double() @ W.double().t()
    return y if b is None else y + b.double()


@torch.no_grad()
@pytest.mark.parametrize("rows", [1, 5, 17, 64])
def test_the_packed_product_is_x_w_transposed_plus_b(rows):
    torch.manual_seed(0)
    x, W, b = torch.randn(rows, 40), torch.randn(300, 40), torch.randn(300)
    assert packed.serves(x, W)
    torch.testing.assert_close(packed.linear(x, W, b).double(), exact(x, W, b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed.linear(x, W).double(), exact(x, W), rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_a_rows_result_does_not_depend_on_the_other_rows_from_16_rows_up():
    """What lets a search deal its batches to workers and still give each sentence the
    translation it gets alone: a row's logits are the same in a product of 16 or 40 rows."""
    torch.manual_seed(1)
    x, W = torch.randn(40, 64), torch.randn(500, 64)
    assert torch.equal(packed.linear(x[:16], W), packed.linear(x, W)[:16])
    assert torch.equal(packed.linear(x[8:24], W), packed.linear(x, W)[8:24])


@torch.no_grad()
def test_the_pack_is_made_again_when_the_weight_changes_in_place():
    """As training's validation searches do between updates."""
    torch.manual_seed(2)
    x, W = torch.randn(6, 8), torch.randn(20, 8)
    before = packed.linear(x, W)
    W.mul_(2)
    torch.testing.assert_close(packed.linear(x, W), 2 * before)
    U = torch.randn(8, 12)
    first = step_product(x, U)
    U.add_(1)
    torch.testing.assert_close(step_product(x, U).double(), x.double() @ U.double(), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(first, step_product(x, U))


def test_autograd_other_dtypes_and_cpu_autocast_take_the_plain_path():
    x, W = torch.randn(6, 8), torch.randn(20, 8)
    assert not packed.serves(x, W)  # autograd: the pack has no gradient
    with torch.no_grad():
        assert packed.serves(x, W)
        assert not packed.serves(x.double(), W.double())
        assert not packed.serves(x.unsqueeze(0), W)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not packed.serves(x, W)


@torch.no_grad()
@pytest.mark.parametrize("rows", [3, 5, 20])
def test_the_search_steps_products_through_the_pack(rows):
    """h U (from `packed.PRODUCT_ROWS` rows; fewer through BLAS), log softmax(x Wᵀ + b) and its
    top k, each against its equation in float64."""
    torch.manual_seed(3)
    h, U = torch.randn(rows, 32), torch.randn(32, 96)
    x, W, b = torch.randn(rows, 16), torch.randn(50, 16), torch.randn(50)
    torch.testing.assert_close(step_product(h, U).double(), h.double() @ U.double(), rtol=1e-5, atol=1e-5)
    expected = torch.log_softmax(exact(x, W, b), -1)
    torch.testing.assert_close(step_log_softmax(x, W, b).double(), expected, rtol=1e-5, atol=1e-5)
    values, ids = top_log_softmax(x, W, b, 4)
    best, best_ids = expected.topk(4, -1)
    assert torch.equal(ids, best_ids)
    torch.testing.assert_close(values.double(), best, rtol=1e-5, atol=1e-5)


def test_a_gathered_matrix_is_kept_until_a_tensor_it_reads_changes():
    a, b = torch.randn(4, 3), torch.randn(4, 2)
    calls = []

    def make():
        calls.append(1)
        return torch.cat([a.t(), b.t()])

    with torch.no_grad():
        first = packed.kept((a, b), "_test_cat", make)
        assert packed.kept((a, b), "_test_cat", make) is first and len(calls) == 1
        b.add_(1.0)  # a tensor it reads changed in place: made again, with the new values
        again = packed.kept((a, b), "_test_cat", make)
        assert len(calls) == 2 and torch.equal(again, torch.cat([a.t(), b.t()]))
        other = torch.randn(4, 2)  # another tensor in the same place: made again
        packed.kept((a, other), "_test_cat", lambda: torch.cat([a.t(), other.t()]))
        assert torch.equal(packed.kept((a, other), "_test_cat", make), torch.cat([a.t(), other.t()]))


def test_with_autograd_a_gathered_matrix_is_made_afresh_and_carries_the_gradient():
    w = torch.randn(3, 2, requires_grad=True)
    first = packed.kept((w,), "_test_t", lambda: w.t())
    assert packed.kept((w,), "_test_t", lambda: w.t()) is not first
    first.sum().backward()
    assert torch.equal(w.grad, torch.ones(3, 2))


def test_search_keeps_the_decoders_step_weights_between_batches():
    from ctxnmt.models.nmt import NMTModel
    from ctxnmt.models.settings import ModelConfig

    torch.manual_seed(0)
    model = NMTModel(ModelConfig(emb_dim=8, hidden_dim=8, att_dim=8), 12, 12).eval()
    src, mask = torch.randint(4, 12, (2, 5)), torch.ones(2, 5)
    with torch.no_grad():
        U1 = model.encode(src, mask)["U1"]
        assert model.encode(src, mask)["U1"] is U1  # the same tensor: its packed forms are kept
        model.decoder.gru1.U.weight.mul_(2.0)
        assert torch.equal(model.encode(src, mask)["U1"], model.decoder.gru1.U.weight.t() + 0)
