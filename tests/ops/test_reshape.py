"""Tests of python/dimtorch/ops/reshape.py: reshape and replace_dim_v2 against positional torch (permute + reshape,
narrow/pad/where), forward and backward on padded batches, batch independence and errors."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, strategies as st

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence, make_padded_batch


def test_reshape_static_dims():
    a, b, c = dt.Dim(2, name="a"), dt.Dim(6, name="b"), dt.Dim(5, name="c")
    x = dt.Tensor(torch.randn(2, 6, 5), (a, b, c), feature_dim=c)
    p, q, r = dt.Dim(3, name="p"), dt.Dim(4, name="q"), dt.Dim(5, name="r")
    # (a, b) -> (p, q): in place, c stays
    check_against_torch(lambda t: dt.reshape(t, (a, b), (p, q)), lambda t: t.reshape(3, 4, 5), [x],
                        expect_dims=(p, q, c))
    assert dt.reshape(x, (a, b), (p, q)).feature_dim is c
    # in_dims not adjacent and out of order: permuted into the place of the first
    check_against_torch(lambda t: dt.reshape(t, (c, a), (dt.Dim(10, name="ca"),)),
                        lambda t: t.permute(2, 0, 1).reshape(10, 6), [x])
    # one dim sized from data takes what is left
    free = dt.Dim(None, name="free")
    out = dt.reshape(x, (a, b, c), (r, free))
    assert out.raw.shape == (5, 12) and out.dims == (r, free) and out.feature_dim is None


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_reshape_keeps_dynamic_dims_aside(pad):
    """Reshaping static dims of a padded batch: the dynamic dim and its padding are untouched, per sequence."""
    bt = make_padded_batch((5, 3, 0), feature=6, pad_value=pad, extra_time=1)
    h, d = dt.Dim(2, name="heads"), dt.Dim(3, name="head_dim")
    check_against_torch(lambda t: dt.reshape(t, (bt.feature,), (h, d)), lambda t: t.reshape(3, 6, 2, 3), [bt.x],
                        expect_dims=(bt.batch, bt.time, h, d))
    check_batch_independence(lambda t, m: dt.reshape(t, (bt.feature,), (h, d)), bt.x, bt.batch, bt.time)


def test_reshape_errors():
    bt = make_padded_batch((5, 3), feature=6)
    cases = [
        (lambda: dt.reshape(bt.x, (bt.feature,), (dt.Dim(4, name="four"),)),
         r"dimtorch.reshape\(\): in_dims \('feature'\(6\)\) have sizes \[6\] \(6 entries\), which do not fit out_dims"),
        (lambda: dt.reshape(bt.x, (), (dt.Dim(4),)), r"dimtorch.reshape\(\): in_dims is empty"),
        (lambda: dt.reshape(bt.x, (bt.feature, bt.feature), (dt.Dim(36),)), r"dimtorch.reshape\(\): in_dims lists a dim twice"),
        (lambda: dt.reshape(bt.x, (bt.feature,), (bt.time,)), r"dimtorch.reshape\(\): out dim .*time.* is already a dim of source"),
        (lambda: dt.reshape(bt.x, (bt.batch,), (dt.Dim(2, name="b2"),)),
         r"dimtorch.reshape\(\): the lengths of .*time.* vary over .*batch.*, which would be merged away"),
        (lambda: dt.reshape(bt.x, (bt.feature,), (dt.Dim(None, name="u"), dt.Dim(None, name="v"))),
         r"dimtorch.reshape\(\): out_dims has 2 dims sized from data"),
        (lambda: dt.reshape(bt.x, (dt.Dim(6, name="feature"),), (dt.Dim(6),)),
         r"dimtorch.reshape\(\): in_dims entry 'feature'\(6\) is not a dim of x"),
        # out_dims whose product passes int64 (the fast path's product overflowed: signed overflow)
        (lambda: dt.reshape(bt.x, (bt.feature,), (dt.Dim(2**40, name="huge"), dt.Dim(2**62, name="huger"))),
         r"dimtorch.reshape\(\): in_dims \('feature'\(6\)\) have sizes \[6\] \(6 entries\), which do not fit"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
    with pytest.raises(TypeError, match=r"dimtorch.reshape\(\): out_dims\[0\] must be a Dim, got int"):
        dt.reshape(bt.x, (bt.feature,), (6,))


@given(perm=st.permutations([0, 1, 2]), sizes=st.sampled_from([(2, 6), (3, 4), (12, 1), (1, 12)]))
def test_reshape_any_layout(perm, sizes):
    a, b, c = dt.Dim(3, name="a"), dt.Dim(4, name="b"), dt.Dim(2, name="c")
    base = torch.randn(3, 4, 2)
    x = dt.Tensor(base.permute(perm), tuple((a, b, c)[i] for i in perm))
    p, q = dt.Dim(sizes[0], name="p"), dt.Dim(sizes[1], name="q")
    out = dt.reshape(x, (a, b), (p, q))
    torch.testing.assert_close(out.raw_aligned((p, q, c)), base.reshape(sizes[0], sizes[1], 2))


# ---- replace_dim_v2 -------------------------------------------------------------------------------------


def test_replace_dim_v2_static():
    a, f = dt.Dim(3, name="a"), dt.Dim(4, name="f")
    x = dt.Tensor(torch.randn(3, 4), (a, f), feature_dim=f)
    for n in (2, 4, 6):
        g = dt.Dim(n, name="g")
        out = dt.replace_dim_v2(x, in_dim=f, out_dim=g)
        assert out.dims == (a, g) and out.feature_dim is g

        def oracle(t, n=n):
            return t[:, :n] if n <= 4 else F.pad(t, (0, n - 4))

        check_against_torch(lambda t, g=g: dt.replace_dim_v2(t, in_dim=f, out_dim=g), oracle, [x])
    with pytest.raises(ValueError, match=r"dimtorch.replace_dim_v2\(\): out_dim 'g'\(6\) \(size 6\) is larger than "
                                         r"in_dim 'f'\(4\) \(size 4\) and allow_expand=False"):
        dt.replace_dim_v2(x, in_dim=f, out_dim=dt.Dim(6, name="g"), allow_expand=False)
    with pytest.raises(ValueError, match=r"dimtorch.replace_dim_v2\(\): out_dim 'g'\(2\) \(size 2\) is smaller"):
        dt.replace_dim_v2(x, in_dim=f, out_dim=dt.Dim(2, name="g"), allow_shrink=False)
    with pytest.raises(ValueError, match=r"dimtorch.replace_dim_v2\(\): out_dim 'a'\(3\) is already a dim of source"):
        dt.replace_dim_v2(x, in_dim=f, out_dim=a)
    with pytest.raises(ValueError, match=r"dimtorch.replace_dim_v2\(\): out_dim 'u'\(\?\) takes its size from data"):
        dt.replace_dim_v2(x, in_dim=f, out_dim=dt.Dim(None, name="u"))
    with pytest.raises(ValueError, match=r"dimtorch.replace_dim_v2\(\): in_dim 'z'\(4\) is not a dim of x"):
        dt.replace_dim_v2(x, in_dim=dt.Dim(4, name="z"), out_dim=dt.Dim(2, name="g"))


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("new_lengths", [(6, 1, 2), (2, 3, 0), (4, 3, 1)])
def test_replace_dim_v2_dynamic(pad, new_lengths):
    """A dynamic time dim replaced by one with other lengths: frames beyond each sequence's old length read 0,
    so no padding reaches the new valid frames; padding NaN never leaks into values or gradients."""
    bt = make_padded_batch((4, 3, 1), pad_value=pad, extra_time=1)
    new_time = dt.Dim(dt.Tensor(torch.tensor(new_lengths), (bt.batch,)), name="new_time")
    n_new = max(new_lengths)
    lengths = torch.tensor(bt.lengths)

    def oracle(t):
        n_old = t.shape[1]
        t = t[:, :n_new] if n_new <= n_old else F.pad(t, (0, 0, 0, n_new - n_old))
        keep = torch.arange(n_new)[None, :] < lengths[:, None]
        return torch.where(keep[:, :, None], t, 0.0)

    check_against_torch(lambda t: dt.replace_dim_v2(t, in_dim=bt.time, out_dim=new_time), oracle, [bt.x])
    out = dt.replace_dim_v2(bt.x, in_dim=bt.time, out_dim=new_time)
    assert out.dims == (bt.batch, new_time, bt.feature)
    for i, n in enumerate(new_lengths):
        assert torch.isfinite(out.raw[i, :n]).all()


def test_replace_dim_v2_batch_independence():
    """Each sequence alone, its time dim replaced by time + 2: the frames of the batch result (its own two
    extra frames read 0, not the padding of the batch)."""
    bt = make_padded_batch((4, 3, 1), pad_value=PAD_NAN, extra_time=2)
    out = dt.replace_dim_v2(bt.x, in_dim=bt.time, out_dim=bt.time + 2)
    for i, n in enumerate(bt.lengths):
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        alone = dt.replace_dim_v2(dt.Tensor(bt.x.raw[i:i + 1, :n], (b1, t1, bt.feature)), in_dim=t1, out_dim=t1 + 2)
        torch.testing.assert_close(alone.raw[0], out.raw[i, :n + 2])
        assert bool((alone.raw[0, n:] == 0).all())


def test_replace_dim_v2_same_size_is_a_rename():
    bt = make_padded_batch((4, 3, 1), pad_value=PAD_NAN)
    renamed = dt.Dim(dt.Tensor(torch.tensor(bt.lengths), (bt.batch,)), name="renamed")
    out = dt.replace_dim_v2(bt.x, in_dim=bt.time, out_dim=renamed)
    assert out.raw is bt.x.raw  # lengths within the old ones (host check): no where


def test_reshape_fast_path_matches_the_python_definition():
    """dimtorch._C.reshape takes static in_dims adjacent in order into new static out_dims (one reshape); every
    other call is the Python definition's, with the same results and errors."""
    from dimtorch.ops import reshape as _reshape
    bt = make_padded_batch((5, 3, 0), feature=6, pad_value=PAD_NAN, extra_time=1)
    h, d = dt.Dim(2, name="heads"), dt.Dim(3, name="head_dim")
    x = dt.Tensor(bt.x.raw, bt.x.dims, feature_dim=bt.feature)
    xt = x.copy_transpose((bt.feature, bt.batch, bt.time))
    hd = dt.Tensor(torch.randn(3, 2, 3), (bt.batch, h, d), feature_dim=d)
    cases = [(x, (bt.feature,), (h, d)), (xt, (bt.feature,), (d, h)), (hd, (h, d), (dt.Dim(6, name="f6"),)),
             (hd, [h, d], [dt.Dim(6, name="f6")]), (hd, (d, h), (dt.Dim(6, name="f6"),)),
             (x, (bt.feature,), (h, dt.Dim(None, name="free")))]
    for t, i, o in cases:
        fast, slow = dt.reshape(t, i, o), _reshape.reshape(t, i, o)
        assert fast.dims == slow.dims and fast.feature_dim is slow.feature_dim
        torch.testing.assert_close(fast.raw, slow.raw, equal_nan=True)
    assert dt.reshape(hd, (h, d), (dt.Dim(6, name="f6"),)).feature_dim is None
    assert dt.reshape(x, (bt.feature,), (h, d)).raw.data_ptr() == x.raw.data_ptr()  # a view
    with pytest.raises(ValueError, match=r"dimtorch.reshape\(\): in_dims \('heads'\(2\), 'head_dim'\(3\)\) have sizes"):
        dt.reshape(hd, (h, d), (dt.Dim(5, name="f5"),))
    with pytest.raises(TypeError, match=r"dimtorch.reshape\(\)"):
        dt.reshape(hd, (h, d))
