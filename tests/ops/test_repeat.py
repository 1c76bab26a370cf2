"""Tests of python/dimtorch/ops/repeat.py: repeat against torch.repeat_interleave per sequence, forward and backward on
padded batches (garbage repeats in the padding), batch independence, max_len_factor and errors."""
import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, make_padded_batch


def _repeats(b, seed=0, high=4):
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, high, b.x.raw.shape[:2], generator=g)
    raw[~b.mask] = 10**6  # garbage in the padding: never repeated
    return dt.Tensor(raw, (b.batch, b.time))


def _oracle(b, reps, n_out):
    def fn(x):
        rows = []
        for i, n in enumerate(b.lengths):
            r = x[i, :n].repeat_interleave(reps[i, :n], dim=0)
            rows.append(torch.cat([r, r.new_zeros(n_out - r.shape[0], x.shape[2])]))
        return torch.stack(rows)
    return fn


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0)])
def test_repeat_against_repeat_interleave(pad, order):
    b = make_padded_batch((5, 3, 0, 1), pad_value=pad, extra_time=1)
    reps = _repeats(b)
    x = b.x.copy_transpose(tuple(b.x.dims[i] for i in order))
    out, out_dim = dt.repeat(x, in_spatial_dim=b.time, repeats=reps)
    expected_lengths = [int(reps.raw[i, :n].sum()) for i, n in enumerate(b.lengths)]
    assert out_dim.lengths.dims == (b.batch,) and out_dim.lengths.raw.tolist() == expected_lengths
    assert set(out.dims) == {b.batch, out_dim, b.feature}
    inv = [order.index(i) for i in range(3)]
    oracle = _oracle(b, reps.raw, max(expected_lengths))
    check_against_torch(lambda t, r: dt.repeat(t, in_spatial_dim=b.time, repeats=r, out_spatial_dim=out_dim)[0],
                        lambda t, r: oracle(t.permute(inv)), [x, reps], out_dims=(b.batch, out_dim, b.feature))


def test_repeat_batch_independence():
    """Each sequence alone gives the frames it gives in the batch."""
    b = make_padded_batch((5, 3, 0, 1), pad_value=PAD_NAN)
    reps = _repeats(b, seed=2)
    out, out_dim = dt.repeat(b.x, in_spatial_dim=b.time, repeats=reps)
    full = out.raw_aligned((b.batch, out_dim, b.feature))
    for i, n in enumerate(b.lengths):
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        alone, dim1 = dt.repeat(dt.Tensor(b.x.raw[i:i + 1, :n], (b1, t1, b.feature)), in_spatial_dim=t1,
                                repeats=dt.Tensor(reps.raw[i:i + 1, :n], (b1, t1)))
        k = int(out_dim.lengths.raw[i])
        assert dim1.lengths.raw.tolist() == [k]
        torch.testing.assert_close(alone.raw_aligned((b1, dim1, b.feature))[0, :k], full[i, :k])


def test_repeat_static_dim_and_broadcast_repeats():
    """A static in dim; repeats with a batch dim the values lack: the result gains it."""
    t, f, h = dt.Dim(4, name="t"), dt.Dim(2, name="f"), dt.Dim(2, name="h")
    x = dt.Tensor(torch.randn(4, 2), (t, f))
    reps = dt.Tensor(torch.tensor([[1, 0, 2, 1], [0, 0, 3, 0]]), (h, t))
    out, out_dim = dt.repeat(x, in_spatial_dim=t, repeats=reps)
    assert out_dim.lengths.raw.tolist() == [4, 3] and out.dims == (h, out_dim, f)
    torch.testing.assert_close(out.raw[0], x.raw.repeat_interleave(reps.raw[0], dim=0))
    torch.testing.assert_close(out.raw[1, :3], x.raw.repeat_interleave(reps.raw[1], dim=0))
    one, one_dim = dt.repeat(x, in_spatial_dim=t, repeats=dt.Tensor(torch.tensor([2, 0, 1, 1], dtype=torch.int32), (t,)))
    assert one_dim.lengths.dims == () and one.dims == (one_dim, f)
    torch.testing.assert_close(one.raw, x.raw.repeat_interleave(torch.tensor([2, 0, 1, 1]), dim=0))


def test_repeat_max_len_factor():
    t = dt.Dim(4, name="t")
    x = dt.Tensor(torch.arange(4.0), (t,))
    reps = dt.Tensor(torch.tensor([1, 9, 0, 3]), (t,))
    out, out_dim = dt.repeat(x, in_spatial_dim=t, repeats=reps, max_len_factor=2)
    # total 13 > 2 * 4: each nonzero keeps 1 (3 frames), the surplus 10 scaled to the budget 5: 9 -> 1 + 4, 3 -> 1 + 1
    assert out_dim.lengths.raw.tolist() == 8 and out.raw.tolist() == [0, 1, 1, 1, 1, 1, 3, 3]
    same, _ = dt.repeat(x, in_spatial_dim=t, repeats=dt.Tensor(torch.tensor([1, 2, 0, 3]), (t,)), max_len_factor=2)
    assert same.raw.tolist() == [0, 1, 1, 3, 3, 3]


def test_repeat_errors():
    b = make_padded_batch((3, 2))
    reps = _repeats(b)
    bad = dt.Tensor(torch.where(b.mask, -1, 0), (b.batch, b.time))
    with pytest.raises(ValueError, match=r"dimtorch.repeat\(\): repeats must be >= 0, got -1"):
        dt.repeat(b.x, in_spatial_dim=b.time, repeats=bad)
    with pytest.raises(TypeError, match=r"dimtorch.repeat\(\): repeats must be of an integer dtype, got float32"):
        dt.repeat(b.x, in_spatial_dim=b.time, repeats=dt.Tensor(reps.raw.float(), reps.dims))
    with pytest.raises(ValueError, match=r"dimtorch.repeat\(\): in_spatial_dim 'feature'\(4\) is not a dim of repeats"):
        dt.repeat(b.x, in_spatial_dim=b.feature, repeats=reps)
    with pytest.raises(ValueError, match=r"dimtorch.repeat\(\): the lengths of 'time'\[batch\] vary over 'batch'\(\?\), "
                                         r"which is not a dim of repeats"):
        dt.repeat(b.x, in_spatial_dim=b.time, repeats=dt.Tensor(torch.ones(3, dtype=torch.int64), (b.time,)))
    with pytest.raises(ValueError, match=r"dimtorch.repeat\(\): out_spatial_dim 'o'\(3\) does not have the repeated lengths"):
        dt.repeat(b.x, in_spatial_dim=b.time, repeats=reps, out_spatial_dim=dt.Dim(3, name="o"))
    with pytest.raises(ValueError, match=r"dimtorch.repeat\(\): max_len_factor must be >= 1"):
        dt.repeat(b.x, in_spatial_dim=b.time, repeats=reps, max_len_factor=0.5)


def test_limit_repeats_bounds_each_sequence_and_keeps_short_ones():
    """limit_repeats against the rule by hand: per sequence, at most max_len_factor * length frames under
    repeat, each nonzero repeat keeps one frame, sequences within the bound unchanged, padding 0."""
    batch = dt.Dim(3, name="batch")
    t = dt.Dim(dt.Tensor(torch.tensor([4, 2, 0]), (batch,)), name="time")
    raw = torch.tensor([[5, 1, 0, 6], [1, 2, 99, 99], [7, 7, 7, 7]])  # garbage in the padding
    limited = dt.limit_repeats(dt.Tensor(raw, (batch, t)), in_spatial_dim=t, max_len_factor=2.0)
    assert limited.dims == (batch, t)
    got = limited.raw
    assert got[0].sum() <= 8 and (got[0] > 0).tolist() == [True, True, False, True]
    assert got[1].tolist() == [1, 2, 0, 0]  # within the bound: unchanged; padding 0
    assert got[2].tolist() == [0, 0, 0, 0]
    # the same as dt.repeat's own max_len_factor
    x = dt.Tensor(torch.arange(12.0).reshape(3, 4), (batch, t))
    a, a_dim = dt.repeat(x, in_spatial_dim=t, repeats=dt.Tensor(raw, (batch, t)), max_len_factor=2.0)
    b, b_dim = dt.repeat(x, in_spatial_dim=t, repeats=limited)
    assert a_dim.lengths.raw.tolist() == b_dim.lengths.raw.tolist()
    # idempotent
    again = dt.limit_repeats(limited, in_spatial_dim=t, max_len_factor=2.0)
    assert torch.equal(again.raw, got)
    # each sequence alone
    for i, n in enumerate([4, 2, 0]):
        b1 = dt.Dim(1, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        alone = dt.limit_repeats(dt.Tensor(raw[i:i + 1, :max(n, 0)], (b1, t1)), in_spatial_dim=t1, max_len_factor=2.0)
        assert alone.raw[0].tolist() == got[i, :n].tolist()


def test_limit_repeats_errors():
    t = dt.Dim(3, name="t")
    reps = dt.Tensor(torch.tensor([1, 2, 3]), (t,))
    with pytest.raises(ValueError, match=r"dimtorch\.limit_repeats\(\): max_len_factor must be a number >= 1"):
        dt.limit_repeats(reps, in_spatial_dim=t, max_len_factor=0.5)
    with pytest.raises(TypeError, match=r"dimtorch\.limit_repeats\(\): repeats must be of an integer dtype"):
        dt.limit_repeats(dt.Tensor(torch.ones(3), (t,)), in_spatial_dim=t, max_len_factor=2)
    with pytest.raises(ValueError, match=r"in_spatial_dim 'u'\(2\) is not a dim of repeats"):
        dt.limit_repeats(reps, in_spatial_dim=dt.Dim(2, name="u"), max_len_factor=2)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_repeat_fast_path_against_the_definition(pad):
    """The C++ fast path (values over (batch, time, rest), int64 repeats over (batch, time), on the host) against
    the Python definition: values, gradients, the new dim's lengths; the calls it hands over (another layout,
    int32 repeats, out_spatial_dim, max_len_factor, a static dim, negative repeats, garbage in the padding)."""
    from dimtorch.ops import repeat as _repeat
    from fast_path_checks import assert_same, both
    b = make_padded_batch((5, 3, 1, 0), feature=3, pad_value=pad, extra_time=1)
    g = torch.Generator().manual_seed(4)
    reps = torch.randint(0, 3, b.x.raw.shape[:2], generator=g)
    reps[:, -1] = -7  # garbage in the padding: never read
    r = dt.Tensor(reps, (b.batch, b.time))
    out, out_dim = both(dt.repeat, _repeat.repeat, b.x, in_spatial_dim=b.time, repeats=r)
    assert out.dims == (b.batch, out_dim, b.feature) and out.feature_dim is b.feature
    for i, n in enumerate(b.lengths):
        want = torch.repeat_interleave(b.x.raw[i, :n], reps[i, :n].clamp(min=0), dim=0)
        assert out_dim.lengths.raw[i] == want.shape[0]
        torch.testing.assert_close(out.raw[i, :want.shape[0]], want, equal_nan=True)
    raw = b.x.raw.clone().requires_grad_(True)
    y, _ = dt.repeat(dt.Tensor(raw, b.x.dims), in_spatial_dim=b.time, repeats=r)
    y.raw.sum().backward()
    raw2 = b.x.raw.clone().requires_grad_(True)
    y2, _ = _repeat.repeat(dt.Tensor(raw2, b.x.dims), in_spatial_dim=b.time, repeats=r)
    y2.raw.sum().backward()
    assert torch.equal(raw.grad, raw2.grad)
    both(dt.repeat, _repeat.repeat, dt.Tensor(b.x.raw.transpose(1, 2).contiguous(), (b.batch, b.feature, b.time)),
         in_spatial_dim=b.time, repeats=r)
    both(dt.repeat, _repeat.repeat, b.x, in_spatial_dim=b.time, repeats=dt.Tensor(reps.int(), r.dims))
    both(dt.repeat, _repeat.repeat, b.x, in_spatial_dim=b.time, repeats=r, max_len_factor=1.5)
    assert_same(dt.repeat(b.x, in_spatial_dim=b.time, repeats=r, out_spatial_dim=out_dim), (out, out_dim))
    static = dt.Dim(reps.shape[1], name="frames")
    both(dt.repeat, _repeat.repeat, dt.Tensor(b.x.raw, (b.batch, static, b.feature)), in_spatial_dim=static,
         repeats=dt.Tensor(reps.clamp(min=0), (b.batch, static)))
    bad = reps.clone()
    bad[0, 0] = -1
    for fn in (dt.repeat, _repeat.repeat):
        with pytest.raises(ValueError, match=r"dimtorch\.repeat\(\): repeats must be >= 0"):
            fn(b.x, in_spatial_dim=b.time, repeats=dt.Tensor(bad, r.dims))
