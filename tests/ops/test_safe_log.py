"""Tests of python/dimtorch/ops/safe_log.py (dt.safe_log) and its C++ fast path (src/ops/safe_log.cpp): against
torch.log(torch.clamp_min(x, eps)) forward and backward on padded batches (NaN/1e30 padding) and each sequence
alone; the fast path against the definition (dims, markers, values, gradients) on every float dtype and eps form
it takes, and the calls it hands to the definition; errors name the call."""
import pytest
import torch

import dimtorch as dt
from dimtorch.ops import safe_log as _safe_log
from fast_path_checks import definition_calls
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence, make_padded_batch


def test_safe_log():
    f = dt.Dim(4, name="f")
    x = dt.Tensor(torch.tensor([0.0, -1.0, 1e-12, 3.0], requires_grad=True), (f,))
    y = dt.safe_log(x, eps=1e-10)
    torch.testing.assert_close(y.raw, torch.log(torch.tensor([1e-10, 1e-10, 1e-10, 3.0])))
    y.raw.sum().backward()
    torch.testing.assert_close(x.raw.grad, torch.tensor([0.0, 0.0, 0.0, 1 / 3.0]))
    assert torch.isfinite(dt.safe_log(dt.Tensor(torch.zeros(4), (f,))).raw).all()


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("eps", [None, 1e-6, 2])
def test_against_torch_on_a_padded_batch(pad, eps):
    b = make_padded_batch((5, 3, 0, 1), pad_value=pad)
    x = dt.Tensor(b.x.raw.abs(), b.x.dims, feature_dim=b.feature)  # (zeros and the padding's values included)
    floor = torch.finfo(torch.float32).tiny * 2 ** -23 if eps is None else float(eps)  # float32's smallest
    check_against_torch(lambda t: dt.safe_log(t, eps=eps), lambda r: torch.log(torch.clamp_min(r, floor)), [x])
    check_batch_independence(lambda t, _: dt.safe_log(t, eps=eps), x, b.batch, b.time)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("eps", [None, 1e-3, 1, float("inf")])
def test_fast_path_is_the_definition(dtype, eps):
    """Values, dims and markers (the feature dim kept, no sparse dim) and gradients equal the definition's; the
    calls it takes (eps None, a positive finite float or an int) never run the definition."""
    b = make_padded_batch((4, 2, 0), pad_value=PAD_NAN, dtype=dtype)
    raw = torch.cat([b.x.raw[:, :1] * 0, b.x.raw[:, 1:]], dim=1)  # zeros, negatives, NaN padding
    for order in ((0, 1, 2), (2, 0, 1)):
        dims = tuple(b.x.dims[i] for i in order)
        leaf_fast = raw.permute(*order).detach().requires_grad_(True)
        leaf_slow = raw.permute(*order).detach().requires_grad_(True)
        fast = dt.safe_log(dt.Tensor(leaf_fast, dims, feature_dim=b.feature), eps=eps)
        slow = _safe_log.safe_log(dt.Tensor(leaf_slow, dims, feature_dim=b.feature), eps=eps)
        assert fast.dims == slow.dims and fast.feature_dim is b.feature and fast.sparse_dim is None
        torch.testing.assert_close(fast.raw, slow.raw, rtol=0, atol=0, equal_nan=True)
        cot = torch.rand(fast.raw.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
        fast.raw.backward(cot)
        slow.raw.backward(cot)
        torch.testing.assert_close(leaf_fast.grad, leaf_slow.grad, rtol=0, atol=0, equal_nan=True)
        x = dt.Tensor(raw.permute(*order), dims, feature_dim=b.feature)
        taken = eps is None or eps != float("inf")
        calls = definition_calls(lambda: dt.safe_log(x, eps=eps), _safe_log.safe_log)
        assert calls == (0 if taken else 1), (eps, calls)


def test_calls_the_fast_path_hands_to_the_definition():
    f = dt.Dim(3, name="f")
    ints = dt.Tensor(torch.tensor([0, 1, 5]), (f,))
    y = dt.safe_log(ints, eps=0.5)  # an int tensor with an eps: the definition's maximum, then log
    torch.testing.assert_close(y.raw, torch.log(torch.tensor([0.5, 1.0, 5.0])))
    assert definition_calls(lambda: dt.safe_log(ints, eps=0.5), _safe_log.safe_log) == 1


def test_errors_name_the_call():
    f = dt.Dim(4, name="f")
    x = dt.Tensor(torch.ones(4), (f,))
    with pytest.raises(ValueError, match=r"dimtorch\.safe_log\(\): eps must be a number > 0"):
        dt.safe_log(x, eps=0.0)
    with pytest.raises(ValueError, match=r"dimtorch\.safe_log\(\): eps must be a number > 0"):
        dt.safe_log(x, eps=float("nan"))
    with pytest.raises(ValueError, match=r"dimtorch\.safe_log\(\): eps must be a number > 0"):
        dt.safe_log(x, eps=True)
    with pytest.raises(TypeError, match=r"dimtorch\.safe_log\(\): x must be a float tensor, got int64"):
        dt.safe_log(dt.Tensor(torch.zeros(4, dtype=torch.int64), (f,)))
    with pytest.raises(TypeError, match=r"dimtorch\.safe_log\(\)"):
        dt.safe_log(torch.ones(4))
    with pytest.raises(TypeError, match=r"dimtorch\.safe_log\(\)"):
        dt.safe_log(x=x)
