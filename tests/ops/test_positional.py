"""Tests of python/dimtorch/ops/positional.py: sinusoidal (absolute, relative) encodings against their
formulas written out, and apply_rope against a complex-number rotation, forward and backward, on
NaN/1e30-padded batches and per sequence alone; errors name the call."""
import math

import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence, make_padded_batch


def _absolute(positions, feat, base=1e4):
    """The formula, element by element: [sin(p w_k)]_k ++ [cos(p w_k)]_k, w_k = base^(-k/(F/2-1))."""
    half = feat // 2
    out = torch.empty(len(positions), feat, dtype=torch.float64)
    for i, p in enumerate(positions):
        for k in range(half):
            w = base ** (-k / (half - 1))
            out[i, k] = math.sin(p * w)
            out[i, half + k] = math.cos(p * w)
    return out


def _relative(distances, feat):
    half = feat // 2
    out = torch.empty(len(distances), feat, dtype=torch.float64)
    for i, d in enumerate(distances):
        for k in range(half):
            w = 1e4 ** (-2 * k / feat)
            out[i, k] = math.sin(d * w)
            out[i, half + k] = math.cos(d * w)
    return out


@pytest.mark.parametrize("offset", [None, 3])
def test_sinusoidal_positional_encoding_static_and_dynamic(offset):
    pb = make_padded_batch((5, 3, 0), feature=4)
    feat = dt.Dim(8, name="pos_feat")
    for spatial in (pb.time, dt.Dim(6, name="static")):
        pe = dt.sinusoidal_positional_encoding(spatial_dim=spatial, feat_dim=feat, offset=offset)
        assert pe.dims == (spatial, feat) and pe.feature_dim is feat and pe.dtype == "float32"
        n = spatial.get_max_size()
        expected = _absolute([i + (offset or 0) for i in range(n)], 8).float()
        torch.testing.assert_close(pe.raw, expected, atol=1e-6, rtol=1e-5)
    # cached: the same raw for the same arguments, other base -> other values
    a = dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=feat, offset=offset)
    assert a.raw is dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=feat, offset=offset).raw
    b = dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=feat, offset=offset, base=100,
                                          dtype="float64")
    torch.testing.assert_close(b.raw, _absolute([i + (offset or 0) for i in range(5)], 8, base=100))


def test_sinusoidal_positional_encoding_offset_tensor_and_single_step():
    pb = make_padded_batch((4, 2), feature=4)
    feat = dt.Dim(6, name="pos_feat")
    offsets = dt.Tensor(torch.tensor([2, 7]), (pb.batch,))
    pe = dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=feat, offset=offsets)
    assert pe.dims == (pb.batch, pb.time, feat)
    for b, o in enumerate((2, 7)):
        torch.testing.assert_close(pe.raw[b], _absolute(range(o, o + 4), 6).float(), atol=1e-6, rtol=1e-5)
    step = dt.sinusoidal_positional_encoding(spatial_dim=None, feat_dim=feat, offset=offsets)
    assert step.dims == (pb.batch, feat)
    torch.testing.assert_close(step.raw, _absolute([2, 7], 6).float(), atol=1e-6, rtol=1e-5)
    one = dt.sinusoidal_positional_encoding(spatial_dim=None, feat_dim=feat, offset=5)
    assert one.dims == (feat,)
    torch.testing.assert_close(one.raw, _absolute([5], 6)[0].float(), atol=1e-6, rtol=1e-5)
    k = dt.Dim(2, name="k")
    enc = dt.sinusoidal_encoding(dt.Tensor(torch.tensor([[0.5, 2.0], [1.0, 3.0]]), (pb.batch, k)), feat_dim=feat)
    assert enc.dims == (pb.batch, k, feat)
    torch.testing.assert_close(enc.raw[1], _absolute([1.0, 3.0], 6).float(), atol=1e-6, rtol=1e-5)


def test_relative_positional_encoding_rows_and_out_dim():
    pb = make_padded_batch((5, 3, 1), feature=4)
    feat = dt.Dim(8, name="pos_feat")
    pe, out = dt.relative_positional_encoding(query_spatial_dim=pb.time, key_value_spatial_dim=pb.time, feat_dim=feat)
    assert out.size == 9 and pe.dims == (out, feat) and pe.feature_dim is feat
    torch.testing.assert_close(pe.raw, _relative(range(-4, 5), 8).float(), atol=1e-6, rtol=1e-5)
    again, out2 = dt.relative_positional_encoding(query_spatial_dim=pb.time, key_value_spatial_dim=pb.time,
                                                  feat_dim=feat)
    assert out2 is out  # the same dims give the same out dim
    kv = dt.Dim(7, name="kv")
    pe, out = dt.relative_positional_encoding(query_spatial_dim=pb.time, key_value_spatial_dim=kv, feat_dim=feat,
                                              query_offset=2)
    assert out.size == 4 + 7
    torch.testing.assert_close(pe.raw, _relative([d - 2 for d in range(-4, 7)], 8).float(), atol=1e-6, rtol=1e-5)


def test_relative_positional_encoding_single_step_per_sequence():
    pb = make_padded_batch((5, 3, 1), feature=4)
    feat = dt.Dim(4, name="pos_feat")
    pe, out = dt.relative_positional_encoding(query_spatial_dim=None, key_value_spatial_dim=pb.time, feat_dim=feat)
    assert out is pb.time and pe.dims == (pb.batch, pb.time, feat)
    for b, n in enumerate((5, 3, 1)):
        # the query is each sequence's last frame: distances j - (n - 1) on its valid frames
        torch.testing.assert_close(pe.raw[b, :n], _relative([j - (n - 1) for j in range(n)], 4).float(),
                                   atol=1e-6, rtol=1e-5)


def _rope_oracle(x, sin, cos):
    """Pairs (x[2i], x[2i+1]) as complex numbers times exp(i angle)."""
    z = torch.view_as_complex(x.unflatten(-1, (-1, 2)).contiguous())
    rotated = z * torch.complex(cos, sin)
    return torch.view_as_real(rotated).flatten(-2)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_apply_rope_against_complex_rotation(pad):
    pb = make_padded_batch((5, 3, 0), feature=6, pad_value=pad)
    pe = dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=pb.feature)
    sin, cos = pe.raw.chunk(2, dim=-1)
    check_against_torch(lambda x: dt.apply_rope(x, pe, pb.feature),
                        lambda x: _rope_oracle(x, sin, cos), [pb.x],
                        expect_dims=(pb.batch, pb.time, pb.feature), atol=1e-6, rtol=1e-5)
    # x in another order: the result has x's other dims, then feat_dim
    xt = pb.x.copy_transpose((pb.feature, pb.time, pb.batch))
    y = dt.apply_rope(xt, pe, pb.feature)
    assert y.dims == (pb.time, pb.batch, pb.feature)
    valid = pb.mask
    torch.testing.assert_close(y.raw_aligned((pb.batch, pb.time, pb.feature))[valid],
                               dt.apply_rope(pb.x, pe, pb.feature).raw[valid])


def test_apply_rope_batch_independence():
    pb = make_padded_batch((5, 3, 1), feature=4, pad_value=PAD_NAN)

    def fn(x, dim_map):
        t = dim_map(pb.time)
        pe = dt.sinusoidal_positional_encoding(spatial_dim=t, feat_dim=pb.feature)
        return dt.apply_rope(x, pe, pb.feature)

    check_batch_independence(fn, pb.x, pb.batch, pb.time)


def test_positional_errors():
    pb = make_padded_batch((3, 2), feature=4)
    with pytest.raises(ValueError, match=r"dimtorch\.sinusoidal_positional_encoding\(\): feat_dim .* even and >= 4"):
        dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=dt.Dim(5, name="odd"))
    with pytest.raises(ValueError, match=r"sinusoidal_positional_encoding\(\): feat_dim .* even and >= 4"):
        dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=dt.Dim(2, name="two"))
    with pytest.raises(ValueError, match=r"sinusoidal_positional_encoding\(\): spatial_dim 'batch'.* size from data"):
        dt.sinusoidal_positional_encoding(spatial_dim=pb.batch, feat_dim=pb.feature)
    with pytest.raises(ValueError, match=r"sinusoidal_positional_encoding\(\): spatial_dim=None .* offset"):
        dt.sinusoidal_positional_encoding(spatial_dim=None, feat_dim=pb.feature)
    with pytest.raises(TypeError, match=r"sinusoidal_positional_encoding\(\): offset must be"):
        dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=pb.feature, offset=1.5)
    with pytest.raises(TypeError, match=r"sinusoidal_positional_encoding\(\): offset must hold integers"):
        dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=pb.feature,
                                          offset=dt.Tensor(torch.tensor([1.0, 2.0]), (pb.batch,)))
    with pytest.raises(ValueError, match=r"sinusoidal_positional_encoding\(\): dtype must be a float dtype"):
        dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=pb.feature, dtype="int64")
    with pytest.raises(ValueError, match=r"sinusoidal_encoding\(\): feat_dim .* already a dim of indices"):
        dt.sinusoidal_encoding(dt.Tensor(torch.zeros(4), (pb.feature,)), feat_dim=pb.feature)
    with pytest.raises(TypeError, match=r"relative_positional_encoding\(\): key_value_spatial_dim must be a Dim"):
        dt.relative_positional_encoding(query_spatial_dim=pb.time, key_value_spatial_dim=3, feat_dim=pb.feature)
    with pytest.raises(ValueError, match=r"relative_positional_encoding\(\): query_offset must be 0 for one step"):
        dt.relative_positional_encoding(query_spatial_dim=None, key_value_spatial_dim=pb.time, feat_dim=pb.feature,
                                        query_offset=1)
    with pytest.raises(ValueError, match=r"apply_rope\(\): feat_dim 'other'.* must be in x"):
        dt.apply_rope(pb.x, dt.zeros((pb.time, pb.feature)), dt.Dim(4, name="other"))
    with pytest.raises(ValueError, match=r"apply_rope\(\): pos_enc has dims \('k'\(2\)\) that x lacks"):
        dt.apply_rope(pb.x, dt.zeros((dt.Dim(2, name="k"), pb.feature)), pb.feature)
    with pytest.raises(TypeError, match=r"apply_rope\(\): x must be a dimtorch.Tensor"):
        dt.apply_rope(pb.x.raw, dt.zeros((pb.feature,)), pb.feature)


def test_relative_encoding_raw_of_an_empty_time():
    """No frames at all (a batch of empty sequences, e.g. a data-parallel rank's share): no rows."""
    from dimtorch.ops.positional import relative_positional_encoding_raw
    assert relative_positional_encoding_raw(0, 0, 8).shape == (0, 8)
    assert relative_positional_encoding_raw(1, 1, 8).shape == (1, 8)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_apply_rope_fast_path(pad):
    """apply_rope's C++ fast path (feat_dim x's last dim, pos_enc over dims of x of its raw sizes) against the
    definition: values, dims, markers and gradients of x and pos_enc (check), pos_enc in another order or over
    fewer dims, float64 pos_enc (a float64 result), multi-head x; the calls it takes never run the definition,
    the others (feat_dim not last, a shorter pos_enc, errors) go to it."""
    from definition_checks import check
    from fast_path_checks import definition_calls
    from dimtorch.ops import positional as _positional
    pb = make_padded_batch((5, 3, 0), feature=6, pad_value=pad)
    heads = dt.Dim(2, name="heads")
    pe = dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=pb.feature)
    x4 = dt.Tensor(torch.stack([pb.x.raw, -pb.x.raw], 1), (pb.batch, heads, pb.time, pb.feature),
                   feature_dim=pb.feature)
    pe_grad = dt.Tensor(pe.raw.clone().requires_grad_(True), pe.dims)
    taken = [(pb.x, pe), (x4, pe), (pb.x, pe.copy_transpose((pb.feature, pb.time))), (x4, pe_grad),
             (pb.x, dt.Tensor(pe.raw[0], (pb.feature,))), (pb.x, dt.cast(pe, "float64")),
             (dt.cast(pb.x, "float64"), pe)]
    for x, p in taken:
        check(dt.apply_rope, x, p, pb.feature)
        assert definition_calls(lambda: dt.apply_rope(x, p, pb.feature), _positional.apply_rope) == 0
    longer = dt.sinusoidal_positional_encoding(spatial_dim=pb.time, feat_dim=pb.feature)
    handed = [(pb.x.copy_transpose((pb.feature, pb.batch, pb.time)), pe),
              (pb.x, dt.Tensor(torch.cat([longer.raw, longer.raw]), (pb.time, pb.feature))),
              (pb.x, dt.zeros((dt.Dim(2, name="k"), pb.feature)))]
    for x, p in handed:
        assert definition_calls(lambda: _quietly(dt.apply_rope, x, p, pb.feature), _positional.apply_rope) == 1
    check(dt.apply_rope, *handed[0], pb.feature)


def _quietly(fn, *args):
    try:
        fn(*args)
    except ValueError:
        pass
