"""Tests of python/dimtorch/_shape_ops.py: merge_dims, split_dims, expand_dim, squeeze, replace_dim."""
import pytest
import torch

import dimtorch as dt
from helpers import check_against_torch, make_padded_batch


def static_x(*sizes, names="abcd"):
    dims = tuple(dt.Dim(n, name=names[i]) for i, n in enumerate(sizes))
    return dt.Tensor(torch.randn(*sizes), dims), dims


def test_merge_dims_adjacent_static():
    x, (a, b, c) = static_x(2, 3, 4)
    out, m = dt.merge_dims(x, dims=(b, c))
    assert m.size == 12 and out.dims == (a, m)
    check_against_torch(lambda t: dt.merge_dims(t, dims=(b, c), out_dim=m)[0], lambda r: r.reshape(2, 12), [x],
                        out_dims=(a, m))


def test_merge_dims_permuted_into_place():
    x, (a, b, c) = static_x(2, 3, 4)
    out, m = dt.merge_dims(x, dims=(c, a))  # c major, a minor; placed where a was (first)
    assert out.dims == (m, b) and m.size == 8
    check_against_torch(lambda t: dt.merge_dims(t, dims=(c, a), out_dim=m)[0],
                        lambda r: r.permute(2, 0, 1).reshape(8, 3), [x], out_dims=(m, b))


def test_merge_dims_keeps_padded_batch_dims():
    pb = make_padded_batch((4, 2), feature=6)
    h, k = dt.Dim(2, name="heads"), dt.Dim(3, name="key")
    x = dt.split_dims(pb.x, axis=pb.feature, dims=(h, k))
    assert x.dims == (pb.batch, pb.time, h, k)
    out, m = dt.merge_dims(x, dims=(h, k), out_dim=pb.feature)
    assert m is pb.feature and out.dims == pb.x.dims
    check_against_torch(lambda t: dt.merge_dims(dt.split_dims(t, axis=pb.feature, dims=(h, k)),
                                                dims=(k, h), out_dim=pb.feature)[0],
                        lambda r: r.reshape(2, 4, 2, 3).transpose(2, 3).reshape(2, 4, 6), [pb.x])


def test_merge_dims_from_data_size_gives_dim_none():
    batch = dt.Dim(None, name="batch")
    f = dt.Dim(3, name="f")
    x = dt.Tensor(torch.randn(5, 3), (batch, f))
    out, m = dt.merge_dims(x, dims=(batch, f))
    assert m.size is None and m.dyn_size is None and out.shape == (15,)


def test_merge_dims_errors():
    x, (a, b, c) = static_x(2, 3, 4)
    other = dt.Dim(5, name="other")
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): dims entry 'other'\(5\) is not a dim of x \(dims: 'a'\(2\), 'b'\(3\), 'c'\(4\)\)"):
        dt.merge_dims(x, dims=(a, other))
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): out_dim 'other'\(5\) does not fit the merged size 6"):
        dt.merge_dims(x, dims=(a, b), out_dim=other)
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): dims is empty"):
        dt.merge_dims(x, dims=())
    pb = make_padded_batch((3, 1))
    with pytest.raises(NotImplementedError, match=r"dimtorch\.merge_dims\(\): merging the dynamic dim 'time'"):
        dt.merge_dims(pb.x, dims=(pb.batch, pb.time))


def test_split_dims():
    x, (a, b) = static_x(2, 12)
    h, k = dt.Dim(3, name="h"), dt.Dim(4, name="k")
    out = dt.split_dims(x, axis=b, dims=(h, k))
    assert out.dims == (a, h, k)
    check_against_torch(lambda t: dt.split_dims(t, axis=b, dims=(h, k)), lambda r: r.reshape(2, 3, 4), [x])
    with pytest.raises(ValueError, match=r"dimtorch\.split_dims\(\): the sizes of dims \('h'\(3\), 'h2'\(5\)\) multiply to 15, but axis 'b'\(12\) has size 12"):
        dt.split_dims(x, axis=b, dims=(h, dt.Dim(5, name="h2")))
    with pytest.raises(ValueError, match=r"dimtorch\.split_dims\(\): axis 'k'\(4\) is not a dim of x"):
        dt.split_dims(x, axis=k, dims=(h,))
    with pytest.raises(ValueError, match=r"dimtorch\.split_dims\(\): 'a'\(2\) is already a dim of x"):
        dt.split_dims(x, axis=b, dims=(a, dt.Dim(6, name="six")))
    pb = make_padded_batch((3, 1))
    with pytest.raises(NotImplementedError, match=r"dimtorch\.split_dims\(\): splitting the dynamic dim 'time'"):
        dt.split_dims(pb.x, axis=pb.time, dims=(h,))


def test_expand_dim_is_a_view():
    pb = make_padded_batch((3, 2))
    beam = dt.Dim(3, name="beam")
    out = dt.expand_dim(pb.x, beam)
    assert out.dims == (beam,) + pb.x.dims and out.raw.data_ptr() == pb.x.raw.data_ptr()
    assert out.raw.stride(0) == 0
    check_against_torch(lambda t: dt.expand_dim(t, beam), lambda r: r.unsqueeze(0).expand(3, *r.shape), [pb.x])
    with pytest.raises(ValueError, match=r"dimtorch\.expand_dim\(\): dim 'batch'\(\?\) must be static"):
        dt.expand_dim(pb.x, dt.Dim(None, name="batch"))
    with pytest.raises(ValueError, match=r"dimtorch\.expand_dim\(\): dim 'feature'\(4\) is already a dim of x"):
        dt.expand_dim(pb.x, pb.feature)


def test_squeeze():
    x, (a, one, c) = static_x(2, 1, 4)
    out = dt.squeeze(x, axis=one)
    assert out.dims == (a, c)
    check_against_torch(lambda t: dt.squeeze(t, axis=one), lambda r: r[:, 0], [x])
    with pytest.raises(ValueError, match=r"dimtorch\.squeeze\(\): axis 'c'\(4\) has size 4, not 1"):
        dt.squeeze(x, axis=c)


def test_replace_dim():
    pb = make_padded_batch((3, 1), extra_time=1)
    out, t2 = dt.replace_dim(pb.x, in_dim=pb.time)
    assert t2 is not pb.time and out.dims == (pb.batch, t2, pb.feature) and out.raw is pb.x.raw
    assert t2.dyn_size.raw.tolist() == [3, 1]
    f2 = dt.Dim(4, name="f2")
    out, o = dt.replace_dim(pb.x, in_dim=pb.feature, out_dim=f2)
    assert o is f2 and out.dims == (pb.batch, pb.time, f2) and out.feature_dim is f2
    out, o = dt.replace_dim(pb.x, in_dim=pb.feature)
    assert o.size == 4 and o is not pb.feature
    check_against_torch(lambda t: dt.replace_dim(t, in_dim=pb.feature, out_dim=f2)[0], lambda r: r, [pb.x])
    with pytest.raises(ValueError, match=r"dimtorch\.replace_dim\(\): out_dim 'f5'\(5\) does not fit the size 4 of in_dim 'feature'\(4\)"):
        dt.replace_dim(pb.x, in_dim=pb.feature, out_dim=dt.Dim(5, name="f5"))
    with pytest.raises(ValueError, match=r"dimtorch\.replace_dim\(\): in_dim 'f2'\(4\) is not a dim of x"):
        dt.replace_dim(pb.x, in_dim=f2)


def test_merge_dims_fast_path_matches_the_python_definition():
    """Adjacent static dims in order take the C++ reshape; the result equals _shape_ops.merge_dims."""
    from dimtorch import _shape_ops
    b, h, d = dt.Dim(None, name="b"), dt.Dim(2, name="h"), dt.Dim(4, name="d")
    raw = torch.randn(3, 2, 4)
    x = dt.Tensor(raw, (b, h, d), feature_dim=d)
    fast, m = dt.merge_dims(x, dims=(h, d))
    slow, m2 = _shape_ops.merge_dims(x, dims=(h, d), out_dim=m)
    assert fast.dims == slow.dims == (b, m) and m.size == 8 and m.name == "h*d"
    assert torch.equal(fast.raw, slow.raw) and fast.feature_dim is None
    out = dt.Dim(8, name="hd")
    y, o = dt.merge_dims(x, dims=(h, d), out_dim=out)
    assert o is out and y.dims == (b, out)
