"""Tests of python/dimtorch/ops/slicing.py: slice, shift_right/left, reverse_sequence, against per-sequence torch."""
import pytest
import torch
from hypothesis import given, strategies as st

import dimtorch as dt
from helpers import check_against_torch, check_batch_independence, make_padded_batch


def per_sequence(raw, lengths, fn, out_lengths, n_out, fill=0.0):
    """Oracle over raw (batch, time, feat): fn(seq (n, feat)) -> (m, feat) per sequence alone, the
    first out_lengths[b] frames kept and `fill` after them up to n_out."""
    rows = []
    for b, (n, m) in enumerate(zip(lengths, out_lengths)):
        o = fn(raw[b, :n])[:m]
        rows.append(torch.cat([o, raw.new_full((n_out - m, raw.shape[2]), fill)]))
    return torch.stack(rows)


def test_slice_static():
    a, f = dt.Dim(3, name="a"), dt.Dim(10, name="f")
    x = dt.Tensor(torch.randn(3, 10), (a, f))
    for start, end, step, n in [(2, 7, 1, 5), (-4, None, 1, 4), (1, -1, 3, 3), (0, None, 4, 3), (5, 5, 1, 0)]:
        y, d = dt.slice(x, axis=f, start=start, end=end, step=step)
        assert d.size == n and y.dims == (a, d)
        check_against_torch(lambda t: dt.slice(t, axis=f, start=start, end=end, step=step)[0],
                            lambda r: r[:, start:end:step], [x])


@pytest.mark.parametrize("start,end,step", [(1, None, 1), (0, -1, 1), (2, -1, 2), (1, None, 3), (1, 3, 1), (0, 4, 2),
                                            (7, None, 1)])
def test_slice_dynamic(start, end, step):
    lengths = [6, 3, 1, 0]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    y, d = dt.slice(pb.x, axis=pb.time, start=start, end=end, step=step)

    def hand(n):
        e = n if end is None else (n + end if end < 0 else min(n, end))
        return len(range(start, max(e, start), step))

    expected = [hand(n) for n in lengths]
    assert d.lengths.raw.tolist() == expected and y.dims == (pb.batch, d, pb.feature)
    assert y.raw.shape[1] == max(expected)
    if end is None or end < 0:
        assert d is dt.slice(pb.x, axis=pb.time, start=start, end=end, step=step)[1]  # dim math: cached
    check_against_torch(lambda t: dt.slice(t, axis=pb.time, start=start, end=end, step=step)[0],
                        lambda r: per_sequence(r, lengths, lambda s: s[start:end:step], expected, max(expected)),
                        [pb.x])


def test_slice_errors():
    pb = make_padded_batch([3, 1], feature=4)
    with pytest.raises(ValueError,
                       match=r"dimtorch\.slice\(\): slice 1:6 is out of range of 'feature'\(4\) \(size 4\)"):
        dt.slice(pb.x, axis=pb.feature, start=1, end=6)
    with pytest.raises(ValueError, match=r"dimtorch\.slice\(\): start=-1 on the dynamic dim 'time'\[batch\]"):
        dt.slice(pb.x, axis=pb.time, start=-1)
    with pytest.raises(ValueError, match=r"dimtorch\.slice\(\): axis 'x'\(2\) is not a dim of x \(dims: 'batch'"):
        dt.slice(pb.x, axis=dt.Dim(2, name="x"), start=1)
    with pytest.raises(ValueError, match=r"dimtorch\.slice\(\): step must be >= 1, got 0"):
        dt.slice(pb.x, axis=pb.feature, step=0)


def shifted_right(seq, amount, value):
    return torch.cat([seq.new_full((amount, seq.shape[1]), value), seq])[:seq.shape[0]]


def shifted_left(seq, amount, value):
    return torch.cat([seq, seq.new_full((amount, seq.shape[1]), value)])[amount:]


@pytest.mark.parametrize("amount", [1, 2, 8])
def test_shift_dynamic(amount):
    lengths = [6, 3, 1, 0]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    for fn, oracle in [(dt.shift_right, shifted_right), (dt.shift_left, shifted_left)]:
        y = fn(pb.x, axis=pb.time, amount=amount, pad_value=-3.0)
        assert y.dims == pb.x.dims
        check_against_torch(lambda t: fn(t, axis=pb.time, amount=amount, pad_value=-3.0),
                            lambda r: per_sequence(r, lengths, lambda s: oracle(s, amount, -3.0), lengths, 7), [pb.x])
        check_batch_independence(lambda t, m: fn(t, axis=m(pb.time), amount=amount, pad_value=-3.0),
                                 pb.x, pb.batch, pb.time)


def test_shift_static_and_int():
    a, f = dt.Dim(2, name="a"), dt.Dim(5, name="f")
    x = dt.Tensor(torch.arange(10).view(2, 5), (a, f))
    assert dt.shift_right(x, axis=f, amount=2).raw.tolist() == [[0, 0, 0, 1, 2], [0, 0, 5, 6, 7]]
    assert dt.shift_left(x, axis=f, pad_value=-1).raw.tolist() == [[1, 2, 3, 4, -1], [6, 7, 8, 9, -1]]
    assert dt.shift_left(x, axis=f, amount=0) is x
    with pytest.raises(ValueError, match=r"dimtorch\.shift_left\(\): amount must be an int >= 0, got -1"):
        dt.shift_left(x, axis=f, amount=-1)
    with pytest.raises(ValueError, match=r"dimtorch\.shift_right\(\): axis 'b'\(3\) is not a dim of x"):
        dt.shift_right(x, axis=dt.Dim(3, name="b"))


def test_reverse_sequence_dynamic():
    lengths = [6, 3, 1, 0]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    # A layout with time first and feature in the middle.
    x = dt.Tensor(pb.x.raw.permute(1, 2, 0), (pb.time, pb.feature, pb.batch))
    y = dt.reverse_sequence(x, axis=pb.time)
    assert y.dims == x.dims
    check_against_torch(lambda t: dt.reverse_sequence(t, axis=pb.time),
                        lambda r: per_sequence(r.permute(2, 0, 1), lengths, lambda s: s.flip(0), lengths, 7
                                               ).permute(1, 2, 0), [x])
    # Padding stays padding (NaN where x had NaN).
    assert y.raw[6:].isnan().all() and y.raw[3:, :, 1].isnan().all()
    check_batch_independence(lambda t, m: dt.reverse_sequence(t, axis=m(pb.time)), pb.x, pb.batch, pb.time)


def test_reverse_sequence_static():
    a, f = dt.Dim(2, name="a"), dt.Dim(3, name="f")
    x = dt.Tensor(torch.randn(2, 3), (a, f))
    check_against_torch(lambda t: dt.reverse_sequence(t, axis=f), lambda r: r.flip(1), [x])
    with pytest.raises(ValueError, match=r"dimtorch\.reverse_sequence\(\): axis 'b'\(3\) is not a dim of x"):
        dt.reverse_sequence(x, axis=dt.Dim(3, name="b"))


def test_cached_indices_follow_layout_and_size_and_die_with_the_dim():
    """reverse_sequence's index and shift_left's mask are cached per dim and layout: the same dim in
    other dims orders and raw sizes gets its own, and the cache entry goes when the dim goes."""
    import gc

    from dimtorch._core import dim_cache as _dim_cache
    n_entries = len(_dim_cache._CACHE)

    def run():
        lengths = [5, 2, 0]
        pb = make_padded_batch(lengths, feature=2)
        for extra in (0, 2, 0):  # the same dims, more raw frames
            raw = torch.cat([pb.x.raw, pb.x.raw.new_full((3, extra, 2), float("nan"))], 1)
            for perm in [(0, 1, 2), (1, 0, 2), (2, 1, 0)]:
                dims = tuple(pb.x.dims[i] for i in perm)
                x = dt.Tensor(raw.permute(perm), dims)
                for _ in range(2):  # the second call uses the cached index
                    check_against_torch(
                        lambda t: dt.reverse_sequence(t, axis=pb.time),
                        lambda r: per_sequence(r.permute(perm), lengths, lambda s: s.flip(0), lengths,
                                               5 + extra).permute(perm), [x])
                    check_against_torch(
                        lambda t: dt.shift_left(t, axis=pb.time, amount=1, pad_value=-3.0),
                        lambda r: per_sequence(r.permute(perm), lengths, lambda s: shifted_left(s, 1, -3.0), lengths,
                                               5 + extra).permute(perm), [x])
        assert len(_dim_cache._CACHE) > n_entries

    run()
    gc.collect()
    assert len(_dim_cache._CACHE) == n_entries


def test_same_layout_other_dim_gets_its_own_index():
    """Two dims of the same sizes but other lengths, in the same layout, never share an index."""
    for lengths in ([3, 1], [1, 3], [2, 2]):
        pb = make_padded_batch(lengths, feature=1)
        y = dt.reverse_sequence(pb.x, axis=pb.time)
        for b, n in enumerate(lengths):
            torch.testing.assert_close(y.raw[b, :n], pb.x.raw[b, :n].flip(0))


def test_slice_fast_path_markers():
    pb = make_padded_batch([4, 2], feature=3)
    x = dt.Tensor(pb.x.raw, pb.x.dims, feature_dim=pb.time)
    y, d = dt.slice(x, axis=pb.time, start=1)
    assert y.feature_dim is None and d.lengths.raw.tolist() == [3, 1] and y.raw.shape == (2, 3, 3)
    y0, d0 = dt.slice(x, axis=pb.time, start=0)
    assert d0 is pb.time and y0.feature_dim is pb.time
    y9, d9 = dt.slice(x, axis=pb.time, start=9)
    assert d9.lengths.raw.tolist() == [0, 0] and y9.raw.shape == (2, 0, 3)
    with pytest.raises(TypeError, match=r"dimtorch\.slice\(\): x must be a dimtorch\.Tensor, got Tensor"):
        dt.slice(pb.x.raw, axis=pb.time, start=1)


@given(perm=st.permutations([0, 1, 2]), extra=st.integers(0, 2),
       lengths=st.lists(st.integers(0, 4), min_size=1, max_size=3), amount=st.integers(1, 3))
def test_reverse_and_shift_left_any_layout(perm, extra, lengths, amount):
    """New dims every example (ids of dead dims get reused): the cached index/mask always fit."""
    pb = make_padded_batch(lengths, feature=2, extra_time=extra, pad_value=1e30)
    x = dt.Tensor(pb.x.raw.permute(perm), tuple(pb.x.dims[i] for i in perm))
    inv = [perm.index(i) for i in range(3)]
    rev = dt.reverse_sequence(x, axis=pb.time).raw.permute(inv)
    left = dt.shift_left(x, axis=pb.time, amount=amount, pad_value=-3.0).raw.permute(inv)
    for b, n in enumerate(lengths):
        seq = pb.x.raw[b, :n]
        torch.testing.assert_close(rev[b, :n], seq.flip(0))
        torch.testing.assert_close(left[b, :n], shifted_left(seq, amount, -3.0))


def test_reverse_sequence_without_handling_dynamic_dims():
    """handle_dynamic_dims=False flips the whole raw axis (rf's flip_no_mask): padding comes first."""
    b = make_padded_batch((5, 3, 0), pad_value=float("nan"), extra_time=1)
    from dimtorch.ops import slicing as _slicing
    check_against_torch(lambda t: dt.reverse_sequence(t, axis=b.time, handle_dynamic_dims=False),
                        lambda r: r.flip(1), [b.x], mask_padding=False)
    for flag in (True, False):
        fast = dt.reverse_sequence(b.x, axis=b.time, handle_dynamic_dims=flag)
        slow = _slicing.reverse_sequence(b.x, axis=b.time, handle_dynamic_dims=flag)
        torch.testing.assert_close(fast.raw, slow.raw, equal_nan=True)
    torch.testing.assert_close(dt.reverse_sequence(b.x, axis=b.time, handle_dynamic_dims=True).raw,
                               dt.reverse_sequence(b.x, axis=b.time).raw, equal_nan=True)
    with pytest.raises(TypeError, match=r"dimtorch.reverse_sequence\(\): handle_dynamic_dims must be a bool"):
        dt.reverse_sequence(b.x, axis=b.time, handle_dynamic_dims=None)


# ---- slice with per-sequence starts, size and out_dim (rf.slice) ---------------------------------------------

@pytest.mark.parametrize("pad", [float("nan"), 1e30])
@pytest.mark.parametrize("step", [1, 2])
def test_slice_start_tensor_per_sequence(step, pad):
    """start per sequence: each sequence's own window from its start to its end (lengths
    ceildiv(len - start, step), read on the host), per sequence alone, forward and backward."""
    lengths = [6, 3, 1, 0]
    pb = make_padded_batch(lengths, feature=2, extra_time=1, pad_value=pad)
    starts = [2, 0, 3, 1]
    start = dt.Tensor(torch.tensor(starts, dtype=torch.int32), (pb.batch,))
    y, d = dt.slice(pb.x, axis=pb.time, start=start, step=step)
    expected = [max(0, -(-(n - s) // step)) for n, s in zip(lengths, starts)]
    assert d.lengths.raw.tolist() == expected and y.dims == (pb.batch, d, pb.feature)

    def oracle(r):
        rows = []
        for b, (n, s) in enumerate(zip(lengths, starts)):
            m = expected[b]
            o = r[b, s:n:step][:m]
            rows.append(torch.cat([o, r.new_zeros(max(expected) - m, 2)]))
        return torch.stack(rows)

    check_against_torch(lambda t: dt.slice(t, axis=pb.time, start=start, step=step)[0], oracle, [pb.x])
    for b, (n, s) in enumerate(zip(lengths, starts)):  # each sequence alone
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        alone, d1 = dt.slice(dt.Tensor(pb.x.raw[b:b + 1, :n], (b1, t1, pb.feature)), axis=t1,
                             start=dt.Tensor(torch.tensor([s]), (b1,)), step=step)
        assert d1.lengths.raw.tolist() == [expected[b]]
        torch.testing.assert_close(alone.raw[0, :expected[b]], y.raw[b, :expected[b]])


def test_slice_start_tensor_with_size_clips_to_each_sequence():
    """A window of fixed size from per-sequence starts: frames past a sequence's end read its last frame
    (rf's clip_to_valid), never its padding; an end Tensor bounds each window."""
    lengths = [6, 3, 1]
    pb = make_padded_batch(lengths, feature=2, pad_value=float("nan"))
    start = dt.Tensor(torch.tensor([1, 2, 0]), (pb.batch,))
    win = dt.Dim(3, name="win")
    y, d = dt.slice(pb.x, axis=pb.time, start=start, size=win)
    assert d is win and y.dims == (pb.batch, win, pb.feature)
    frames = [[1, 2, 3], [2, 2, 2], [0, 0, 0]]
    expected = torch.stack([pb.x.raw[b, frames[b]] for b in range(3)])
    torch.testing.assert_close(y.raw, expected)
    y, d = dt.slice(pb.x, axis=pb.time, start=start, end=dt.Tensor(torch.tensor([4, 3, 1]), (pb.batch,)))
    assert d.lengths.raw.tolist() == [3, 1, 1]
    y, d = dt.slice(pb.x, axis=pb.time, start=dt.Tensor(torch.tensor(1), ()), end=-1)
    assert d.lengths.raw.tolist() == [4, 1, 0]
    torch.testing.assert_close(y.raw[0, :4], pb.x.raw[0, 1:5])


def test_slice_size_and_out_dim():
    lengths = [6, 3, 1]
    pb = make_padded_batch(lengths, feature=4, pad_value=float("nan"))
    # size an int on a static axis; a Dim of lengths on a dynamic one (each window within its sequence)
    y, d = dt.slice(pb.x, axis=pb.feature, start=1, size=2)
    assert d.size == 2 and torch.equal(y.raw.nan_to_num(), pb.x.raw[:, :, 1:3].nan_to_num())
    w = dt.Dim(dt.Tensor(torch.tensor([4, 2, 0]), (pb.batch,)), name="w")
    y, d = dt.slice(pb.x, axis=pb.time, start=1, size=w)
    assert d is w and y.dims == (pb.batch, w, pb.feature)
    check_against_torch(lambda t: dt.slice(t, axis=pb.time, start=1, size=w)[0], lambda r: r[:, 1:5], [pb.x])
    y, d = dt.slice(pb.x, axis=pb.time, start=1, size=dt.Tensor(torch.tensor([4, 2, 0]), (pb.batch,)))
    assert d.lengths.raw.tolist() == [4, 2, 0]
    # out_dim: the result's dim, after checking its sizes
    out = dt.Dim(dt.Tensor(torch.tensor([5, 2, 0]), (pb.batch,)), name="given")
    y, d = dt.slice(pb.x, axis=pb.time, start=1, out_dim=out)
    assert d is out and y.dims == (pb.batch, out, pb.feature)
    # rf's shift_left: pad then a window of the old size
    padded, (pd,) = dt.pad(pb.x, axes=pb.time, padding=(0, 2))
    y, d = dt.slice(padded, axis=pd, start=2, size=pb.time)
    assert d is pb.time


def test_slice_window_errors():
    pb = make_padded_batch([6, 3, 1], feature=4)
    start = dt.Tensor(torch.tensor([1, 2, 0]), (pb.batch,))
    cases = [
        (lambda: dt.slice(pb.x, axis=pb.time, start=1, size=dt.Dim(dt.Tensor(torch.tensor([2, 3, 1]), (pb.batch,)),
                                                                   name="w")),
         ValueError, r"dimtorch\.slice\(\): a sequence's window 1:1\+'w'\[batch\] goes past its end in 'time'\[batch\]"),
        (lambda: dt.slice(pb.x, axis=pb.feature, start=3, size=2), ValueError,
         r"dimtorch\.slice\(\): frames 3:3\+2 are out of range of 'feature'\(4\) \(size 4\)"),
        (lambda: dt.slice(pb.x, axis=pb.time, start=0, end=2, size=2), ValueError,
         r"dimtorch\.slice\(\): give end or size, not both"),
        (lambda: dt.slice(pb.x, axis=pb.time, start=0, step=2, size=2), ValueError,
         r"dimtorch\.slice\(\): size takes step 1, got step=2"),
        (lambda: dt.slice(pb.x, axis=pb.time, start=dt.Tensor(torch.tensor([1.0, 2.0, 0.0]), (pb.batch,))),
         TypeError, r"dimtorch\.slice\(\): start must be an int or an integer Tensor, got a float32 Tensor"),
        (lambda: dt.slice(pb.x, axis=pb.time, start=1, out_dim=dt.Dim(4, name="o")), ValueError,
         r"dimtorch\.slice\(\): out_dim 'o'\(4\) has sizes 4, but the slice has \[5, 2, 0\]"),
        (lambda: dt.slice(pb.x, axis=pb.time, start=start, size=1.5), TypeError,
         r"dimtorch\.slice\(\): size must be an int, a Tensor or a Dim, got float"),
        (lambda: dt.slice(pb.x, axis=pb.time, start=dt.Tensor(torch.zeros(3, 6, dtype=torch.int64),
                                                                  (pb.batch, pb.time))),
         ValueError, r"dimtorch\.slice\(\): start has the sliced axis 'time'\[batch\] among its dims"),
    ]
    for call, exc, message in cases:
        with pytest.raises(exc, match=message):
            call()


def test_slice_new_arguments_go_to_the_python_definition():
    from dimtorch.ops import slicing as _slicing
    pb = make_padded_batch([6, 3, 1], feature=4, pad_value=float("nan"))
    start = dt.Tensor(torch.tensor([1, 2, 0]), (pb.batch,))
    for kwargs in (dict(start=start), dict(start=start, size=2), dict(start=1, size=pb.time - 1),
                   dict(start=None, end=2), dict(start=0, step=None), dict(start=1, out_dim=pb.time - 1)):
        fast, fd = dt.slice(pb.x, axis=pb.time, **kwargs)
        slow, sd = _slicing.slice(pb.x, axis=pb.time, **kwargs)
        assert fast.dims[0] is slow.dims[0] and fast.dims[2] is slow.dims[2] and fd.name == sd.name
        torch.testing.assert_close(fast.raw, slow.raw, equal_nan=True)


@pytest.mark.parametrize("pad", [float("nan"), 1e30])
def test_slice_end_tensor_per_sequence(pad):
    """slice(end=Tensor): each sequence's frames [start, min(end, its length)) (RETURNN frontend's per-sequence
    end); the out dim's lengths are those counts (end read on the host). Against positional torch (forward and
    backward, NaN/1e30 padding) and each sequence alone; start/step default None (0 and 1)."""
    pb = make_padded_batch((5, 3, 2), pad_value=pad)
    end = dt.Tensor(torch.tensor([4, 9, 1]), (pb.batch,))
    out, dim = dt.slice(pb.x, axis=pb.time, start=1, end=end)
    assert dim.lengths.raw.tolist() == [3, 2, 0] and out.dims == (pb.batch, dim, pb.feature)

    def oracle(x):
        y = torch.zeros(3, 3, x.shape[2], dtype=x.dtype)
        for b, n in enumerate([3, 2, 0]):
            y[b, :n] = x[b, 1:1 + n]
        return y
    check_against_torch(lambda x: dt.slice(x, axis=pb.time, start=1, end=end)[0], oracle, [pb.x])
    for b, (n, e) in enumerate(zip([5, 3, 2], [4, 9, 1])):  # each sequence alone
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        one, d1 = dt.slice(dt.Tensor(pb.x.raw[b:b + 1, :n], (b1, t1, pb.feature)), axis=t1, start=1,
                           end=dt.Tensor(torch.tensor([e]), (b1,)))
        k = d1.lengths.raw.item()
        torch.testing.assert_close(one.raw[0, :k], out.raw[b, :k])
    assert dt.slice(pb.x, axis=pb.time, start=None, step=None)[1] is pb.time
