"""Tests of python/dimtorch/ops/stack.py: split, stack, unstack against torch.split/stack/unbind."""
import pytest
import torch
from hypothesis import given, strategies as st

import dimtorch as dt
from helpers import PAD_LARGE, check_against_torch, check_padding_invariance, make_padded_batch


def test_split_static_and_on_padded_batch():
    pb = make_padded_batch([4, 2], feature=5)
    a, b = dt.Dim(2, name="a"), dt.Dim(3, name="b")
    ya, yb = dt.split(pb.x, axis=pb.feature, out_dims=(a, b))
    assert ya.dims == (pb.batch, pb.time, a) and yb.dims == (pb.batch, pb.time, b)
    check_against_torch(lambda t: dt.split(t, axis=pb.feature, out_dims=(a, b)),
                        lambda r: list(torch.split(r, [2, 3], dim=2)), [pb.x])


def test_split_errors():
    pb = make_padded_batch([4, 2], feature=5)
    with pytest.raises(ValueError, match=r"dimtorch\.split\(\): the sizes of out_dims \('a'\(2\), 'b'\(2\)\) add up "
                                         r"to 4, not to the size 5 of axis 'feature'\(5\)"):
        dt.split(pb.x, axis=pb.feature, out_dims=(dt.Dim(2, name="a"), dt.Dim(2, name="b")))
    with pytest.raises(ValueError, match=r"dimtorch\.split\(\): axis 'c'\(5\) is not a dim of x"):
        dt.split(pb.x, axis=dt.Dim(5, name="c"), out_dims=(dt.Dim(5, name="a"),))


def test_stack_aligns_dims_and_unstack_inverts():
    pb = make_padded_batch([4, 2], feature=3)
    other = dt.Tensor(torch.randn(3, 2, 4), (pb.feature, pb.batch, pb.time))
    y, d = dt.stack([pb.x, other])
    assert d.size == 2 and y.dims == (d, pb.batch, pb.time, pb.feature)
    check_against_torch(lambda s, t: dt.stack([s, t], out_dim=d)[0], lambda r, q: torch.stack([r, q.permute(1, 2, 0)]),
                        [pb.x, other], expect_dims=(d, pb.batch, pb.time, pb.feature))
    parts = dt.unstack(y, axis=d)
    assert [p.dims for p in parts] == [pb.x.dims] * 2
    torch.testing.assert_close(parts[1].raw, other.raw.permute(1, 2, 0), equal_nan=True)
    check_against_torch(lambda t: dt.unstack(t, axis=pb.feature), lambda r: list(torch.unbind(r, 2)), [pb.x])
    k = dt.Dim(2, name="k")
    assert dt.stack([pb.x, pb.x], out_dim=k)[1] is k


def test_stack_errors():
    a, b = dt.Dim(2, name="a"), dt.Dim(3, name="b")
    x, y = dt.Tensor(torch.randn(2), (a,)), dt.Tensor(torch.randn(3), (b,))
    with pytest.raises(ValueError, match=r"dimtorch\.stack\(\): tensors\[1\] has dims \('b'\(3\)\), tensors\[0\] has "
                                         r"\('a'\(2\)\); all must have the same dims"):
        dt.stack([x, y])
    with pytest.raises(ValueError, match=r"dimtorch\.stack\(\): out_dim 'b'\(3\) does not fit 2 tensors"):
        dt.stack([x, x], out_dim=b)
    with pytest.raises(TypeError, match=r"dimtorch\.stack\(\): tensors\[1\] has dtype int64, tensors\[0\] has float32"):
        dt.stack([x, dt.Tensor(torch.zeros(2, dtype=torch.int64), (a,))])
    with pytest.raises(ValueError, match=r"dimtorch\.stack\(\): no tensors to stack"):
        dt.stack([])


# --- dynamic dims ---------------------------------------------------------------------------------------

def seq_parts(raw, lengths, parts):
    """Positional oracle of split on a dynamic time axis: per sequence b, part i is frames
    [offset_b, offset_b + len_i[b]) of raw (batch, time, feat), padded with zeros to max(len_i)."""
    outs = []
    offsets = [0] * raw.shape[0]
    for lens in parts:
        width = max(lens)
        rows = []
        for b in range(raw.shape[0]):
            frames = raw[b, offsets[b]:offsets[b] + lens[b]]
            rows.append(torch.cat([frames, frames.new_zeros(width - lens[b], raw.shape[2])]))
            offsets[b] += lens[b]
        outs.append(torch.stack(rows))
    return outs


def dyn(values, batch, name):
    return dt.Dim(dt.Tensor(torch.tensor(values), (batch,)), name=name)


def test_split_dynamic_undoes_concat():
    pb = make_padded_batch((5, 3, 0, 2), feature=2, extra_time=1)
    u = dyn([2, 1, 0, 2], pb.batch, "u")
    y = dt.Tensor(torch.randn(4, 2, 2), (pb.batch, u, pb.feature))
    joined, d = dt.concat((pb.x, pb.time), (y, u))
    a, b = dt.split(joined, axis=d, out_dims=(pb.time, u))
    assert a.dims == pb.x.dims and b.dims == y.dims
    for part, src, lens in ((a, pb.x, pb.lengths), (b, y, [2, 1, 0, 2])):
        for s, n in enumerate(lens):
            torch.testing.assert_close(part.raw[s, :n], src.raw[s, :n])
    check_against_torch(lambda t: dt.split(t, axis=d, out_dims=(pb.time, u)),
                        lambda r: seq_parts(r, [7, 4, 0, 4], [pb.lengths, [2, 1, 0, 2]]), [joined],
                        out_dims=[a.dims, b.dims])


def test_split_dynamic_static_and_dynamic_parts():
    """time = 1 (static) + A (dynamic) + 2 (static) + B (dynamic), lengths checked on the host."""
    pb = make_padded_batch((6, 4, 3), feature=2, pad_value=PAD_LARGE)
    one, two = dt.Dim(1, name="one"), dt.Dim(2, name="two")
    A, B = dyn([2, 0, 0], pb.batch, "A"), dyn([1, 1, 0], pb.batch, "B")
    parts = (one, A, two, B)
    outs = dt.split(pb.x, axis=pb.time, out_dims=parts)
    assert [o.dims[1] for o in outs] == list(parts) and [o.shape[1] for o in outs] == [1, 2, 2, 1]
    check_against_torch(lambda t: dt.split(t, axis=pb.time, out_dims=parts),
                        lambda r: seq_parts(r, pb.lengths, [[1] * 3, [2, 0, 0], [2] * 3, [1, 1, 0]]), [pb.x],
                        out_dims=[o.dims for o in outs])
    check_padding_invariance(lambda t: dt.split(t, axis=t.dims[1], out_dims=(
        one, t.dims[1] - 1)), lengths=(5, 3, 1, 2))


def test_split_dynamic_each_sequence():
    pb = make_padded_batch((4, 3, 2), feature=1)
    full = dt.split(pb.x, axis=pb.time, out_dims=(dt.Dim(1, name="h"), pb.time - 1))
    for b, n in enumerate(pb.lengths):
        b1 = dt.Dim(None, name="b1")
        t1 = dyn([n], b1, "t1")
        one = dt.split(dt.Tensor(pb.x.raw[b:b + 1, :n], (b1, t1, pb.feature)), axis=t1,
                       out_dims=(dt.Dim(1, name="h"), t1 - 1))
        torch.testing.assert_close(one[0].raw, full[0].raw[b:b + 1])
        torch.testing.assert_close(one[1].raw, full[1].raw[b:b + 1, :n - 1])


def test_split_dynamic_errors():
    pb = make_padded_batch((4, 2), feature=2)
    with pytest.raises(ValueError, match=r"dimtorch\.split\(\): the lengths of out_dims \('a'\(2\), 'b'\(2\)\) add up "
                                         r"to \[4, 4\], not to the lengths \[4, 2\] of axis 'time'\[batch\]"):
        dt.split(pb.x, axis=pb.time, out_dims=(dt.Dim(2, name="a"), dt.Dim(2, name="b")))
    other = dt.Dim(None, name="other")
    foreign = dt.Dim(dt.Tensor(torch.tensor([4]), (other,)), name="foreign")
    with pytest.raises(ValueError, match=r"dimtorch\.split\(\): the lengths of out dim 'foreign'\[other\] vary over "
                                         r"'other'\(\?\)"):
        dt.split(pb.x, axis=pb.time, out_dims=(foreign,))
    with pytest.raises(ValueError, match=r"dimtorch\.split\(\): out_dims must be static or dynamic Dims"):
        dt.split(pb.x, axis=pb.time, out_dims=(dt.Dim(None, name="n"),))


def test_unstack_dynamic_gives_one_tensor_per_position():
    pb = make_padded_batch((3, 1), feature=2, extra_time=2)
    parts = dt.unstack(pb.x, axis=pb.time)
    assert len(parts) == 3 and all(p.dims == (pb.batch, pb.feature) for p in parts)
    check_against_torch(lambda t: dt.unstack(t, axis=pb.time), lambda r: list(torch.unbind(r[:, :3], 1)), [pb.x])
    empty = make_padded_batch((0, 0), feature=2)
    assert dt.unstack(empty.x, axis=empty.time) == ()


@given(data=st.data(), n_parts=st.integers(1, 3))
def test_split_dynamic_property(data, n_parts):
    """Random per-sequence partitions of time into static and dynamic parts, against seq_parts."""
    lengths = data.draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))
    pb = make_padded_batch(lengths, feature=1, extra_time=data.draw(st.integers(0, 2)) or int(max(lengths) == 0))
    parts, rest = [], list(lengths)
    for i in range(n_parts):
        if i == n_parts - 1:
            lens = rest
        elif data.draw(st.booleans()):
            size = data.draw(st.integers(0, min(rest)))
            parts.append((dt.Dim(size, name=f"s{i}"), [size] * len(lengths)))
            rest = [r - size for r in rest]
            continue
        else:
            lens = [data.draw(st.integers(0, r)) for r in rest]
        parts.append((dyn(lens, pb.batch, f"d{i}"), lens))
        rest = [r - n for r, n in zip(rest, lens)]
    out_dims = tuple(d for d, _ in parts)
    outs = dt.split(pb.x, axis=pb.time, out_dims=out_dims)
    expected = seq_parts(pb.x.raw, lengths, [lens for _, lens in parts])
    for o, e, (_, lens) in zip(outs, expected, parts):
        for b, n in enumerate(lens):
            torch.testing.assert_close(o.raw[b, :n], e[b, :n], equal_nan=True)


@pytest.mark.parametrize("pad", [float("nan"), PAD_LARGE])
def test_stack_onto_a_dynamic_dim_from_dim_math(pad):
    """Frame-by-frame results stacked back onto a dynamic dim made by dim math (T1 + T2, as concat makes it):
    one tensor per frame of its longest sequence; against torch.stack, forward and backward, and each
    sequence's valid frames as they were. A dim whose longest sequence has another number of frames, or
    whose lengths vary over a dim the tensors lack, is an error."""
    pb = make_padded_batch((3, 1, 2), pad_value=pad)
    t2 = dt.Dim(dt.Tensor(torch.tensor([1, 2, 0]), (pb.batch,)), name="t2")
    total = pb.time + t2  # lengths 4, 3, 2: max 4
    frames = [dt.gather(pb.x, indices=i, axis=pb.time) for i in (0, 1, 2, 0)]
    out, dim = dt.stack(frames, out_dim=total)
    assert dim is total and out.dims == (total, pb.batch, pb.feature)
    check_against_torch(lambda *f: dt.stack(list(f), out_dim=total)[0], lambda *f: torch.stack(f), frames)
    with pytest.raises(ValueError, match=r"dimtorch\.stack\(\): out_dim .* does not fit 3 tensors"):
        dt.stack(frames[:3], out_dim=total)
    other = dt.Dim(None, name="other")
    lonely = dt.Dim(dt.Tensor(torch.tensor([4, 1]), (other,)), name="lonely")
    with pytest.raises(ValueError, match=r"dimtorch\.stack\(\): out_dim .* does not fit 4 tensors"):
        dt.stack(frames, out_dim=lonely)
