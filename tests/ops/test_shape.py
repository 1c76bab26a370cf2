"""Tests of the shape family: python/dimtorch/ops/shape.py (merge_dims, split_dims, expand_dim, squeeze,
replace_dim) and merge_dims' fast path in src/ops/shape.cpp (the merged dim it caches)."""
import pytest
import torch
from hypothesis import given, strategies as st

import dimtorch as dt
from helpers import PAD_LARGE, check_against_torch, check_padding_invariance, make_padded_batch, valid_mask


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
    assert m.size is None and m.lengths is None and out.shape == (15,)


def test_merge_dims_errors():
    x, (a, b, c) = static_x(2, 3, 4)
    other = dt.Dim(5, name="other")
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): dims entry 'other'\(5\) is not a dim of x \(dims: 'a'\(2\), 'b'\(3\), 'c'\(4\)\)"):
        dt.merge_dims(x, dims=(a, other))
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): out_dim 'other'\(5\) does not fit the merged size 6"):
        dt.merge_dims(x, dims=(a, b), out_dim=other)
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): dims is empty"):
        dt.merge_dims(x, dims=())


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
    assert t2.lengths.raw.tolist() == [3, 1]
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
    from dimtorch.ops import shape as _shape_ops
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


# --- dynamic dims: merge_dims / split_dims ------------------------------------------------------------

def lengths_of(dim):
    return dim.lengths.raw.tolist()


def check_each_sequence(fn, pb, out_axis_of):
    """Batch independence of an op on pb.x whose output keeps batch first and has one dynamic dim:
    each sequence alone (its own dims, its frames only) gives what it gives inside the batch, on its
    valid frames. `out_axis_of(out)` is the raw axis of the output's dynamic dim."""
    full = fn(pb.x, pb.batch, pb.time)
    ax = out_axis_of(full)
    full_len = lengths_of(full.dims[ax])
    for b, n in enumerate(pb.lengths):
        b1 = dt.Dim(None, name="batch1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="time1")
        one = fn(dt.Tensor(pb.x.raw[b:b + 1, :n], (b1, t1, pb.feature)), b1, t1)
        m = lengths_of(one.dims[ax])[0]
        assert m == full_len[b], f"sequence {b}: length {m} alone, {full_len[b]} in the batch"
        torch.testing.assert_close(one.raw.narrow(ax, 0, m), full.raw[b:b + 1].narrow(ax, 0, m), equal_nan=True)


def test_merge_dims_dynamic_first_keeps_a_prefix():
    pb = make_padded_batch((5, 3, 0), feature=2, extra_time=1)
    out, m = dt.merge_dims(pb.x, dims=(pb.time, pb.feature))
    assert m is pb.time * 2 and dt.merge_dims(pb.x, dims=(pb.time, pb.feature))[1] is m
    assert lengths_of(m) == [10, 6, 0] and out.dims == (pb.batch, m) and out.shape == (3, 12)
    check_against_torch(lambda t: dt.merge_dims(t, dims=(pb.time, pb.feature))[0], lambda r: r.reshape(3, 12),
                        [pb.x], expect_dims=(pb.batch, m))
    check_padding_invariance(lambda t: dt.merge_dims(t, dims=t.dims[1:])[0])
    check_each_sequence(lambda t, b, tm: dt.merge_dims(t, dims=(tm, pb.feature))[0], pb, lambda o: 1)
    # Given out_dim: the canonical one, or a dim with the same lengths; others are rejected.
    same = dt.Dim(dt.Tensor(torch.tensor([10, 6, 0]), (pb.batch,)), name="same")
    assert dt.merge_dims(pb.x, dims=(pb.time, pb.feature), out_dim=same)[1] is same
    other = dt.Dim(dt.Tensor(torch.tensor([10, 6, 1]), (pb.batch,)), name="other")
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): out_dim 'other'\[batch\] does not have the "
                                         r"lengths of the merged dim 'time\*2'\[batch\]"):
        dt.merge_dims(pb.x, dims=(pb.time, pb.feature), out_dim=other)


def test_merge_dims_dynamic_permuted_into_place():
    """x (feature, batch, heads, time): time (first in dims) then heads, feature; put where feature was."""
    pb = make_padded_batch((4, 1, 2), feature=3)
    h = dt.Dim(2, name="heads")
    raw = pb.x.raw.permute(2, 0, 1)[:, :, None, :].expand(3, 3, 2, 4) * torch.tensor([1.0, -1.0]).view(1, 1, 2, 1)
    x = dt.Tensor(raw.contiguous(), (pb.feature, pb.batch, h, pb.time))
    out, m = dt.merge_dims(x, dims=(pb.time, h, pb.feature))
    assert m is pb.time * 6 and lengths_of(m) == [24, 6, 12] and out.dims == (m, pb.batch)
    check_against_torch(lambda t: dt.merge_dims(t, dims=(pb.time, h, pb.feature))[0],
                        lambda r: r.permute(3, 2, 0, 1).reshape(24, 3), [x])


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=4), feature=st.integers(1, 3),
       extra=st.integers(0, 2))
def test_merge_dims_dynamic_property(lengths, feature, extra):
    if max(lengths) + extra == 0:
        extra = 1
    pb = make_padded_batch(lengths, feature=feature, extra_time=extra, pad_value=PAD_LARGE)
    out, m = dt.merge_dims(pb.x, dims=(pb.time, pb.feature))
    assert lengths_of(m) == [n * feature for n in lengths]
    mask = valid_mask(out.dims, out.shape)
    for b, n in enumerate(lengths):
        assert bool(mask[b, :n * feature].all()) and not bool(mask[b, n * feature:].any())
        assert torch.equal(out.raw[b, :n * feature], pb.x.raw[b, :n].reshape(-1))


def test_merge_dims_with_the_batch_dim_keeps_padding_frames():
    pb = make_padded_batch((3, 1), feature=2)
    out, m = dt.merge_dims(pb.x, dims=(pb.batch, pb.time))
    assert m.lengths is None and m.size is None and m.name == "batch*time" and out.dims == (m, pb.feature)
    torch.testing.assert_close(out.raw, pb.x.raw.reshape(6, 2), equal_nan=True)
    out, m = dt.merge_dims(pb.x, dims=(pb.time, pb.batch, pb.feature))
    assert m.lengths is None and out.dims == (m,)
    torch.testing.assert_close(out.raw, pb.x.raw.permute(1, 0, 2).reshape(12), equal_nan=True)
    static = dt.Dim(6, name="bt")
    assert dt.merge_dims(pb.x, dims=(pb.batch, pb.time), out_dim=static)[1] is static


def test_merge_dims_dynamic_errors():
    pb = make_padded_batch((3, 1), feature=2)
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): the dynamic dim 'time'\[batch\] must be the only "
                                         r"dynamic dim and come first in dims .*interleave with padding \(dims: "
                                         r"'feature'\(2\), 'time'\[batch\]\)"):
        dt.merge_dims(pb.x, dims=(pb.feature, pb.time))
    u = dt.Dim(dt.Tensor(torch.tensor([2, 2]), (pb.batch,)), name="u")
    y = dt.Tensor(torch.zeros(2, 3, 2), (pb.batch, pb.time, u))
    with pytest.raises(ValueError, match=r"the dynamic dim 'u'\[batch\] must be the only dynamic dim"):
        dt.merge_dims(y, dims=(pb.time, u))
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): the lengths of 'time'\[batch\] vary over "
                                         r"'batch'\(\?\), which would be merged away"):
        dt.merge_dims(pb.x, dims=(pb.batch, pb.feature))
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): out_dim 'o'\(5\) does not fit the merged size 6"):
        dt.merge_dims(pb.x, dims=(pb.batch, pb.time), out_dim=dt.Dim(5, name="o"))


def test_split_dims_dynamic_exact_multiples():
    pb = make_padded_batch((8, 4, 0), feature=2, extra_time=1)
    k = dt.Dim(4, name="k")
    t2 = pb.time // 4
    out = dt.split_dims(pb.x, axis=pb.time, dims=(t2, k))
    assert out.dims == (pb.batch, t2, k, pb.feature) and lengths_of(t2) == [2, 1, 0] and out.shape == (3, 2, 4, 2)
    check_against_torch(lambda t: dt.split_dims(t, axis=pb.time, dims=(t2, k)),
                        lambda r: r[:, :8].reshape(3, 2, 4, 2), [pb.x])
    # merge_dims undoes it: (time // 4) * 4 has the lengths of time again.
    back, m = dt.merge_dims(out, dims=(t2, k))
    assert lengths_of(m) == [8, 4, 0]
    torch.testing.assert_close(back.raw, pb.x.raw[:, :8], equal_nan=True)
    with pytest.raises(ValueError, match=r"dimtorch\.split_dims\(\): the lengths of 'time'\[batch\] \(\[8, 4, 0\]\) "
                                         r"are not all multiples of 3; give pad_to_multiples=True"):
        dt.split_dims(pb.x, axis=pb.time, dims=(pb.time // 3, dt.Dim(3, name="three")))


def test_split_dims_dynamic_pad_to_multiples():
    pb = make_padded_batch((5, 3, 0, 4), feature=2)
    k = dt.Dim(2, name="k")
    t2 = dt.ceildiv(pb.time, 2)

    def oracle(r):
        keep = (torch.arange(5)[None, :] < torch.tensor(pb.lengths)[:, None])[:, :, None]
        return torch.nn.functional.pad(torch.where(keep, r, -1.0), (0, 0, 0, 1), value=-1.0).reshape(4, 3, 2, 2)

    out = dt.split_dims(pb.x, axis=pb.time, dims=(t2, k), pad_value=-1.0)
    assert out.dims == (pb.batch, t2, k, pb.feature) and lengths_of(t2) == [3, 2, 0, 2]
    check_against_torch(lambda t: dt.split_dims(t, axis=pb.time, dims=(t2, k), pad_value=-1.0), oracle, [pb.x])
    # The frames added inside a sequence's last chunk are valid frames holding pad_value.
    assert (out.raw[0, 2, 1] == -1.0).all() and (out.raw[1, 1, 1] == -1.0).all()
    check_padding_invariance(lambda t: dt.split_dims(t, axis=t.dims[1], dims=(dt.ceildiv(t.dims[1], 2), k)))
    check_each_sequence(lambda t, b, tm: dt.split_dims(t, axis=tm, dims=(dt.ceildiv(tm, 2), k)), pb, lambda o: 1)
    same = dt.split_dims(pb.x, axis=pb.time, dims=(t2, k), pad_to_multiples=True, pad_value=-1.0)
    assert torch.equal(same.raw, out.raw)
    # A raw time axis longer than the longest sequence is cut to the chunks that hold frames.
    long = make_padded_batch((3, 1), feature=1, extra_time=4)
    assert dt.split_dims(long.x, axis=long.time, dims=(dt.ceildiv(long.time, 2), k)).shape == (2, 2, 2, 1)


def test_split_dims_dynamic_errors():
    pb = make_padded_batch((4, 2), feature=2)
    k = dt.Dim(2, name="k")
    with pytest.raises(ValueError, match=r"dimtorch\.split_dims\(\): the dynamic part of dims must be "
                                         r"dt\.ceildiv\(time, 2\) by dim math, got 'time//2'\["):
        dt.split_dims(pb.x, axis=pb.time, dims=(pb.time // 2, k), pad_to_multiples=True)
    with pytest.raises(ValueError, match=r"the dynamic part of dims must be time // 2 by dim math, got "
                                         r"'ceildiv\(time,2\)'\["):
        dt.split_dims(pb.x, axis=pb.time, dims=(dt.ceildiv(pb.time, 2), k), pad_to_multiples=False)
    with pytest.raises(ValueError, match=r"the dynamic part of dims must be time // 2 \(or dt\.ceildiv\(time, 2\) to "
                                         r"pad\) by dim math, got 'other'\[batch\]"):
        dt.split_dims(pb.x, axis=pb.time, dims=(dt.Dim(pb.time.lengths, name="other"), k))
    with pytest.raises(ValueError, match=r"dimtorch\.split_dims\(\): splitting the dynamic dim 'time'\[batch\] needs "
                                         r"dims whose first entry is the dynamic part"):
        dt.split_dims(pb.x, axis=pb.time, dims=(k, pb.time // 2))
    with pytest.raises(ValueError, match=r"dimtorch\.split_dims\(\): dims is empty"):
        dt.split_dims(pb.x, axis=pb.time, dims=())


def test_split_dims_static_pad_to_multiples():
    x, (a, b) = static_x(2, 10)
    h, k = dt.Dim(3, name="h"), dt.Dim(4, name="k")
    check_against_torch(lambda t: dt.split_dims(t, axis=b, dims=(h, k), pad_to_multiples=True, pad_value=0.5),
                        lambda r: torch.nn.functional.pad(r, (0, 2), value=0.5).reshape(2, 3, 4), [x])
    with pytest.raises(ValueError, match=r"multiply to 12, but axis 'b'\(10\) has size 10"):
        dt.split_dims(x, axis=b, dims=(h, k))
    with pytest.raises(ValueError, match=r"multiply to 16, but axis 'b'\(10\) has size 10"):
        dt.split_dims(x, axis=b, dims=(dt.Dim(4, name="four"), k), pad_to_multiples=True)


def test_dynamic_shape_ops_read_nothing_from_the_device():
    """On the meta device any read of device values raises; host-to-device copies must not block."""
    from sync_checks import copy_counter
    b = dt.Dim(None, name="batch")
    t = dt.Dim(dt.Tensor(torch.tensor([4, 2, 0]), (b,)), name="time")
    f, k = dt.Dim(3, name="f"), dt.Dim(2, name="k")
    u = dt.Dim(dt.Tensor(torch.tensor([1, 1, 0]), (b,)), name="u")
    rest = dt.Dim(dt.Tensor(torch.tensor([3, 1, 0]), (b,)), name="rest")
    x = dt.Tensor(torch.randn(3, 5, 3, device="meta"), (b, t, f))
    labels = dt.Tensor(torch.zeros(3, 5, dtype=torch.int64, device="meta"), (b, t), sparse_dim=f)
    ops = {
        "merge_dims": lambda: dt.merge_dims(x, dims=(t, f)),
        "merge_dims batch": lambda: dt.merge_dims(x, dims=(b, t)),
        "split_dims //": lambda: dt.split_dims(x, axis=t, dims=(t // 2, k)),
        "split_dims ceildiv": lambda: dt.split_dims(x, axis=t, dims=(dt.ceildiv(t, 2), k)),
        "split": lambda: dt.split(x, axis=t, out_dims=(u, rest)),
        "unstack": lambda: dt.unstack(x, axis=t),
        "sparse_to_dense": lambda: dt.sparse_to_dense(labels, label_value=1.0, other_value=0.0),
    }
    for name, op in ops.items():
        with copy_counter() as c:
            op()
        assert c.blocking == 0, f"{name}: {c.blocking} blocking host-to-device copies"
        assert c.copies <= 1, f"{name}: {c.copies} host-to-device copies (at most one index or mask)"


@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=4), k=st.integers(1, 4), extra=st.integers(0, 3),
       pad=st.booleans())
def test_split_dims_dynamic_property(lengths, k, extra, pad):
    """Against a per-sequence reshape: sequence b gives ceil (pad) or exact len_b / k chunks of k frames."""
    if not pad:
        lengths = [n - n % k for n in lengths]
    if max(lengths) + extra == 0:
        extra = 1
    pb = make_padded_batch(lengths, feature=2, extra_time=extra, pad_value=PAD_LARGE)
    kd = dt.Dim(k, name="k")
    t2 = dt.ceildiv(pb.time, k) if pad else pb.time // k
    out = dt.split_dims(pb.x, axis=pb.time, dims=(t2, kd), pad_value=-3.0)
    chunks = [-(-n // k) for n in lengths]
    assert lengths_of(t2) == chunks and out.shape == (len(lengths), max(chunks), k, 2)
    for b, n in enumerate(lengths):
        frames = torch.cat([pb.x.raw[b, :n], torch.full((chunks[b] * k - n, 2), -3.0)])
        assert torch.equal(out.raw[b, :chunks[b]], frames.reshape(chunks[b], k, 2))


# ---- merge_dims' fast path (src/ops/shape.cpp): the merged dim it caches on the first dim ----

def test_merge_dims_gives_the_same_dim_for_the_same_dims():
    b, t, h, d = dt.Dim(None, name="b"), dt.Dim(5, name="t"), dt.Dim(2, name="h"), dt.Dim(4, name="d")
    q = dt.Tensor(torch.randn(3, 5, 2, 4), (b, t, h, d))
    k = dt.Tensor(torch.randn(5, 2, 4), (t, h, d))
    qm, m = dt.merge_dims(q, dims=(h, d))
    km, m2 = dt.merge_dims(k, dims=(h, d))
    assert m2 is m and m.size == 8 and m.name == "h*d" and qm.dims == (b, t, m) and km.dims == (t, m)
    # Merged the same way, the two combine along the merged dim.
    check_against_torch(lambda x, y: dt.merge_dims(x, dims=(h, d))[0] * dt.merge_dims(y, dims=(h, d))[0],
                        lambda x, y: x.reshape(3, 5, 8) * y.reshape(5, 8), [q, k])
    _, other = dt.merge_dims(q, dims=(t, h))
    assert other is not m and other.size == 10


def test_merge_dims_when_x_holds_the_cached_dim_already():
    h, d = dt.Dim(2, name="h"), dt.Dim(4, name="d")
    _, m = dt.merge_dims(dt.Tensor(torch.randn(2, 4), (h, d)), dims=(h, d))
    x = dt.Tensor(torch.randn(8, 2, 4), (m, h, d))
    y, m2 = dt.merge_dims(x, dims=(h, d))  # m again would appear twice: a new dim
    assert m2 is not m and m2.size == 8 and y.dims == (m, m2)
    assert torch.equal(y.raw, x.raw.reshape(8, 8))


def test_merge_dims_python_path_gives_the_fast_paths_dim():
    """Adjacent dims take the C++ fast path, permuted ones the Python definition: same merged dim."""
    batch, heads, d = dt.Dim(None, name="batch"), dt.Dim(2, name="heads"), dt.Dim(3, name="d")
    _, fast = dt.merge_dims(dt.Tensor(torch.randn(4, 2, 3), (batch, heads, d)), dims=(heads, d))
    _, slow = dt.merge_dims(dt.Tensor(torch.randn(2, 4, 3), (heads, batch, d)), dims=(heads, d))
    assert fast is slow and fast.size == 6


def test_merge_dims_fast_path_refuses_merging_away_what_lengths_vary_over():
    beam, hyp = dt.Dim(2, name="beam"), dt.Dim(2, name="hyp")
    t = dt.Dim(dt.Tensor(torch.tensor([[3, 1], [2, 2]]), (beam, hyp)), name="t")
    x = dt.Tensor(torch.randn(2, 2, 3), (beam, hyp, t))  # beam, hyp adjacent: the fast path's case
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): the lengths of 't'\[beam,hyp\] vary over 'beam'\(2\)"):
        dt.merge_dims(x, dims=(beam, hyp))


def test_expand_dims():
    pb = make_padded_batch((4, 2), pad_value=PAD_LARGE)
    a, c = dt.Dim(2, name="a"), dt.Dim(3, name="c")
    check_against_torch(lambda x: dt.expand_dims(x, [a, c]), lambda r: r.expand(2, 3, *r.shape), [pb.x],
                        expect_dims=(a, c, pb.batch, pb.time, pb.feature))
    out = dt.expand_dims(pb.x, (a,))
    assert out.feature_dim is pb.feature and out.raw.data_ptr() == pb.x.raw.data_ptr()  # a view
    assert dt.expand_dims(pb.x, []) is pb.x
    with pytest.raises(ValueError, match=r"dimtorch\.expand_dims\(\): dim 'time'\[batch\] must be static"):
        dt.expand_dims(pb.x, [a, pb.time])
    with pytest.raises(ValueError, match=r"dimtorch\.expand_dims\(\): dim 'a'\(2\) is already a dim of source or "
                                         r"given twice"):
        dt.expand_dims(pb.x, [a, a])
    with pytest.raises(TypeError, match=r"dimtorch\.expand_dims\(\): dims\[0\] must be a Dim"):
        dt.expand_dims(pb.x, [2])
