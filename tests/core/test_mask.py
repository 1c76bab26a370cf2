"""Tests of src/core/mask.cpp and python/dimtorch/ops/mask.py: get_mask, get_size_tensor, sequence_mask, copy_masked."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import dimtorch as dt
from helpers import PAD_NAN, align_raw, make_padded_batch, valid_mask


def dyn(lengths, batch=None, name="time"):
    batch = batch or dt.Dim(None, name="batch")
    return batch, dt.Dim(dt.Tensor(torch.tensor(lengths, dtype=torch.int64), (batch,)), name=name)


def hand_mask(lengths, size):
    return torch.arange(size)[None, :] < torch.tensor(lengths)[:, None]


def test_get_mask_default_order_and_values():
    batch, t = dyn([3, 0, 1])
    m = t.get_mask()
    assert m.dims == (batch, t) and m.dtype == "bool"
    assert torch.equal(m.raw, hand_mask([3, 0, 1], 3))


def test_get_mask_dims_order():
    batch, t = dyn([3, 0, 1])
    f = dt.Dim(4, name="f")
    m = t.get_mask(dims_order=(f, t, batch))
    assert m.dims == (t, batch)
    assert torch.equal(m.raw, hand_mask([3, 0, 1], 3).t())
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\.get_mask\(\): dims_order lacks .*batch"):
        t.get_mask(dims_order=(t, f))


def test_get_mask_is_cached_per_layout_and_device():
    batch, t = dyn([2, 1])
    assert t.get_mask().raw is t.get_mask().raw
    assert t.get_mask(device="cpu").raw is t.get_mask(device=torch.device("cpu")).raw
    assert t.get_mask(dims_order=(t, batch)).raw is not t.get_mask().raw


def test_get_mask_of_static_dim_raises():
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\.get_mask\(\): dim .*'f'.*has no lengths"):
        dt.Dim(4, name="f").get_mask()
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\.get_mask\(\): dim .*'batch'.*has no lengths"):
        dt.Dim(None, name="batch").get_mask()


def test_get_size_tensor():
    batch, t = dyn([3, 0, 1])
    s = t.get_size_tensor()
    assert s.dims == (batch,) and s.raw.tolist() == [3, 0, 1] and s.dtype == "int64"
    assert t.get_size_tensor().raw is s.raw  # device copy made once, cached
    f = dt.Dim(7, name="f").get_size_tensor()
    assert f.dims == () and f.raw.item() == 7
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\.get_size_tensor\(\): dim .*'batch'.* takes its size from data"):
        batch.get_size_tensor()


def test_sequence_mask():
    batch, t = dyn([3, 0, 1])
    _, u = dyn([1, 2, 2], batch=batch, name="u")
    f = dt.Dim(2, name="f")
    m = dt.sequence_mask((t, batch, u))
    assert m.dims == (t, batch, u)
    expect = hand_mask([3, 0, 1], 3).t()[:, :, None] & hand_mask([1, 2, 2], 2)[None]
    assert torch.equal(m.raw, expect)
    m = dt.sequence_mask((batch, f))
    assert m.dims == () and m.raw.item() is True
    with pytest.raises(TypeError, match=r"dimtorch\.sequence_mask\(\): dims\[2\] must be a Dim, got int"):
        dt.sequence_mask((batch, t, 3))
    with pytest.raises(ValueError, match=r"dims_order lacks .*batch.* needed for the mask of .*time"):
        dt.sequence_mask((t,))


@pytest.mark.parametrize("value", [0.0, -1e9, 7])
def test_copy_masked(value):
    pb = make_padded_batch((4, 0, 2), pad_value=PAD_NAN, extra_time=1)
    y = pb.x.copy_masked(value)
    assert y.dims == pb.x.dims and y.feature_dim is pb.feature
    expect = torch.where(pb.mask[:, :, None], pb.x.raw, float(value))
    assert torch.equal(y.raw, expect)
    assert torch.isnan(pb.x.raw).any()  # x itself is left alone


def test_copy_masked_dims_and_grad():
    pb = make_padded_batch((4, 0, 2), pad_value=PAD_NAN)
    y = pb.x.copy_masked(0.0, dims=(pb.feature,))  # static dims have no padding: unchanged
    assert torch.equal(y.raw.isnan(), pb.x.raw.isnan())
    leaf = pb.x.raw.clone().requires_grad_(True)
    out = dt.Tensor(leaf, pb.x.dims).copy_masked(0.0, dims=pb.time)
    out.raw.sum().backward()
    assert torch.equal(leaf.grad, pb.mask[:, :, None].expand_as(leaf).float())
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.copy_masked\(\): dim .*'other'.* is not in the tensor"):
        pb.x.copy_masked(0.0, dims=dt.Dim(3, name="other"))
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.copy_masked\(\): value must be a Python number"):
        pb.x.copy_masked(torch.tensor(0.0))


def test_lengths_over_two_batch_dims_mask():
    beam, batch = dt.Dim(2, name="beam"), dt.Dim(None, name="batch")
    lengths = torch.tensor([[3, 0, 2], [1, 4, 2]])
    t = dt.Dim(dt.Tensor(lengths, (beam, batch)), name="time")
    m = t.get_mask(dims_order=(batch, t, beam))
    assert m.dims == (batch, t, beam)
    assert torch.equal(m.raw, torch.arange(4)[None, :, None] < lengths.t()[:, None, :])


@settings(max_examples=25)
@given(lens=st.lists(st.integers(0, 6), min_size=1, max_size=4), perm=st.permutations([0, 1, 2]))
def test_sequence_mask_fuzzed(lens, perm):
    batch, t = dyn(lens)
    f = dt.Dim(2, name="f")
    dims = [(batch, t, f)[i] for i in perm]
    m = dt.sequence_mask(dims)
    expect = valid_mask(dims, [{batch: len(lens), t: max(lens), f: 2}[d] for d in dims])
    got = align_raw(m.raw, m.dims, dims).expand(expect.shape)
    assert torch.equal(got, expect)


@pytest.mark.parametrize("lengths, match", [
    (torch.tensor([1.0, 2.0]), r"dimtorch\.Dim\(\): lengths must be an integer Tensor, got dtype float32"),
    (torch.tensor([True, False]), r"dimtorch\.Dim\(\): lengths must be an integer Tensor, got dtype bool"),
    (torch.tensor([3, -1]), r"dimtorch\.Dim\(\): lengths must be >= 0, got min -1"),
])
def test_bad_lengths_raise(lengths, match):
    batch = dt.Dim(None, name="batch")
    with pytest.raises((ValueError, TypeError), match=match):
        dt.Dim(dt.Tensor(lengths, (batch,)), name="time")


def test_lengths_over_a_dynamic_dim_raise():
    batch, t = dyn([2, 1])
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\(\): lengths must be over batch dims without lengths of their own"):
        dt.Dim(dt.Tensor(torch.tensor([1, 1]), (t,)), name="u")
    with pytest.raises(TypeError, match=r"dimtorch\.Dim\(\): lengths must be a dimtorch\.Tensor over batch dims"):
        dt.Dim(torch.tensor([1, 2]), name="u")


def test_int32_lengths_are_accepted():
    batch = dt.Dim(None, name="batch")
    t = dt.Dim(dt.Tensor(torch.tensor([2, 0], dtype=torch.int32), (batch,)), name="time")
    assert torch.equal(t.get_mask().raw, hand_mask([2, 0], 2))
    x = dt.Tensor(torch.ones(2, 2), (batch, t))
    assert dt.reduce_mean(x, axis=t).raw.tolist() == [1.0, 0.0]


def test_lengths_not_matching_the_batch_size_raise():
    batch, t = dyn([3, 1, 2])
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\(\): dim 'time'\[batch\] has lengths over 'batch'\(\?\) of size 3, "
                                         r"but the raw has size 2 there"):
        dt.Tensor(torch.randn(2, 3, 4), (batch, t, dt.Dim(4, name="f")))


def test_get_mask_fast_path_and_python_definition_agree():
    """Dim.get_mask's common call is C++, other argument forms go to dimtorch.ops.mask.get_mask."""
    batch = dt.Dim(None, name="batch")
    t = dt.Dim(dt.Tensor(torch.tensor([3, 1]), (batch,)), name="t")
    f = dt.Dim(2, name="f")
    expect = torch.tensor([[True, True, True], [True, False, False]])
    for kwargs in ({}, {"dims_order": (batch, f, t)}, {"dims_order": (t, batch)}, {"device": "cpu"},
                   {"dims_order": [batch, t], "device": torch.device("cpu")}):
        m = t.get_mask(**kwargs)
        assert m.dtype == "bool"
        torch.testing.assert_close(m.raw_aligned((batch, t)), expect)
    assert t.get_mask(dims_order=(t, f, batch)).dims == (t, batch)


def test_last_frame_position_of_dim():
    pb = make_padded_batch((5, 3, 1))
    pos = dt.last_frame_position_of_dim(pb.time)
    assert pos.dims == (pb.batch,) and pos.raw.tolist() == [4, 2, 0]
    assert dt.last_frame_position_of_dim(pb.feature) == 3
    assert dt.last_frame_position_of_dim(pb.feature, device="cpu").raw.item() == 3
    with pytest.raises(TypeError, match=r"dimtorch\.last_frame_position_of_dim\(\): expected a Dim"):
        dt.last_frame_position_of_dim(3)


def test_cached_lengths_on_another_device_keep_the_layout():
    """The lengths laid out for another tensor (size-1 axes, other places) on a device other than the host's:
    the same layout as on the host (the device copy in the lengths' own layout is only the starting point)."""
    b = dt.Dim(None, name="batch")
    t = dt.Dim(dt.Tensor(torch.tensor([5, 3, 1]), (b,)), name="time")
    for pos, ndim, shape in (((0,), 1, (3,)), ((0,), 2, (3, 1)), ((1,), 2, (1, 3)), ((2,), 3, (1, 1, 3))):
        for device in ("cpu", "meta"):
            raw = dt._C._dim_cached_raw(2, t, pos, ndim, 0, torch.device(device))
            assert tuple(raw.shape) == shape, (pos, ndim, device, raw.shape)


def test_private_cached_raw_and_merged_dim_check_their_arguments():
    """The core's private entry points are reachable from Python: bad arguments raise, never read past
    what was given (a position short for the lengths' axes) or overflow (a product of huge sizes)."""
    from dimtorch import _C
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([1, 2]), (batch,)), name="time")
    with pytest.raises(ValueError, match=r"_dim_cached_raw\(\): one position per axis of the lengths is needed"):
        _C._dim_cached_raw(0, time, (0,), 2, 2, "cpu")
    with pytest.raises(ValueError, match=r"_dim_cached_raw\(\): axis out of range"):
        _C._dim_cached_raw(0, time, (0, 2), 2, 2, "cpu")
    assert _C._dim_cached_raw(0, time, (0, 1), 2, 2, "cpu").tolist() == [[True, False], [True, True]]
    with pytest.raises(OverflowError, match=r"_merged_dim\(dims\): the product of the sizes overflows"):
        _C._merged_dim((dt.Dim(2**40, name="huge"), dt.Dim(2**62, name="huger")))


def test_mask_past_the_dims_limit_raises():
    """Lengths over 24 dims: the mask would have 25, more than a Tensor may (the fast path wrote past its
    arrays); both paths raise. The limit is the core's (kMaxDims)."""
    from dimtorch.ops import mask as _mask
    batch_dims = [dt.Dim(1, name=f"b{i}") for i in range(24)]
    time = dt.Dim(dt.Tensor(torch.ones([1] * 24, dtype=torch.int64), tuple(batch_dims)), name="time")
    for get_mask in (dt.Dim.get_mask, _mask.get_mask):
        with pytest.raises(ValueError, match=r"get_mask\(\): at most 24 dims are supported, the mask of .* would have 25"):
            get_mask(time)
    with pytest.raises(ValueError, match=f"at most {_mask._MAX_DIMS} dims are supported, got 25"):
        dt.Tensor(torch.zeros([1] * 25), tuple(dt.Dim(1) for _ in range(25)))
