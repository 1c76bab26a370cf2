"""Tests of python/dimtorch/ops/packing.py: pack_padded / unpack_padded against torch, sizes from host lengths."""
import pytest
import torch
from hypothesis import given, strategies as st

import dimtorch as dt
from helpers import check_against_torch, make_padded_batch


def test_pack_padded_batch_time():
    lengths = [4, 2, 0, 3]
    pb = make_padded_batch(lengths, feature=3, extra_time=1)
    # A layout with feature first.
    x = dt.Tensor(pb.x.raw.permute(2, 0, 1), (pb.feature, pb.batch, pb.time))
    y, pack = dt.pack_padded(x, dims=(pb.batch, pb.time))
    assert pack.size == sum(lengths) and y.dims == (pack, pb.feature)
    assert not y.raw.isnan().any()
    p9 = dt.Dim(9, name="p9")
    check_against_torch(lambda t: dt.pack_padded(t, dims=(pb.batch, pb.time), out_dim=p9)[0],
                        lambda r: torch.cat([r[:, b, :n].T for b, n in enumerate(lengths)]), [x])
    back = dt.unpack_padded(y, dims=(pb.batch, pb.time), in_dim=pack)
    assert back.dims == (pb.batch, pb.time, pb.feature) and back.raw.shape == (4, 4, 3)
    m = pb.mask[:, :4]
    torch.testing.assert_close(back.raw[m], pb.x.raw[:, :4][m])
    assert (back.raw[~m] == 0).all()
    check_against_torch(lambda t: dt.unpack_padded(t, dims=(pb.batch, pb.time), in_dim=p9),
                        lambda r: torch.nn.utils.rnn.pad_sequence(list(torch.split(r, lengths)), batch_first=True),
                        [dt.Tensor(y.raw, (p9, pb.feature))], mask_padding=False)


def test_pack_padded_time_major_order():
    lengths = [3, 1]
    pb = make_padded_batch(lengths, feature=1)
    y, pack = dt.pack_padded(pb.x, dims=(pb.time, pb.batch))
    expected = torch.stack([pb.x.raw[0, 0], pb.x.raw[1, 0], pb.x.raw[0, 1], pb.x.raw[0, 2]])
    torch.testing.assert_close(y.raw, expected)


def test_pack_padded_errors():
    pb = make_padded_batch([3, 1], feature=2)
    with pytest.raises(ValueError,
                       match=r"dimtorch\.pack_padded\(\): out_dim 'p'\(5\) does not fit the 4 valid frames"):
        dt.pack_padded(pb.x, dims=(pb.batch, pb.time), out_dim=dt.Dim(5, name="p"))
    y, pack = dt.pack_padded(pb.x, dims=(pb.batch, pb.time))
    with pytest.raises(ValueError, match=r"dimtorch\.unpack_padded\(\): in_dim 'feature'\(2\) has 2 frames, but "
                                         r"\('batch'\(\?\), 'time'\[batch\]\) have 4 valid frames"):
        dt.unpack_padded(y, dims=(pb.batch, pb.time), in_dim=pb.feature)


def test_pack_padded_cached_index_per_dims_and_layout():
    """The index is cached per dims and layout: other dims orders, other raw sizes and other dims of the
    same sizes get their own; a cached call still checks out_dim."""
    lengths = [3, 0, 2]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    bt = torch.cat([pb.x.raw[b, :n] for b, n in enumerate(lengths)])
    tb = torch.stack([pb.x.raw[0, 0], pb.x.raw[2, 0], pb.x.raw[0, 1], pb.x.raw[2, 1], pb.x.raw[0, 2]])
    x_tb = dt.Tensor(pb.x.raw.permute(1, 0, 2), (pb.time, pb.batch, pb.feature))
    x_short = dt.Tensor(pb.x.raw[:, :3], pb.x.dims)
    for _ in range(2):
        for x, dims, expected in [(pb.x, (pb.batch, pb.time), bt), (x_short, (pb.batch, pb.time), bt),
                                  (x_tb, (pb.time, pb.batch), tb), (x_tb, (pb.batch, pb.time), bt)]:
            y, pack = dt.pack_padded(x, dims=dims)
            assert pack.size == 5 and y.dims == (pack, pb.feature)
            torch.testing.assert_close(y.raw, expected)
    with pytest.raises(ValueError, match=r"dimtorch\.pack_padded\(\): out_dim 'p'\(4\) does not fit the 5 valid"):
        dt.pack_padded(pb.x, dims=(pb.batch, pb.time), out_dim=dt.Dim(4, name="p"))
    other = make_padded_batch([1, 3, 2], feature=2, extra_time=1, seed=1)  # same sizes, other lengths
    y, pack = dt.pack_padded(other.x, dims=(other.batch, other.time))
    assert pack.size == 6
    torch.testing.assert_close(y.raw, torch.cat([other.x.raw[b, :n] for b, n in enumerate([1, 3, 2])]))
    check_against_torch(lambda t: dt.pack_padded(t, dims=(pb.batch, pb.time), out_dim=dt.Dim(5, name="p5"))[0],
                        lambda r: torch.cat([r[b, :n] for b, n in enumerate(lengths)]), [pb.x], mask_padding=False)


@given(lengths=st.lists(st.integers(0, 4), min_size=1, max_size=3), extra=st.integers(0, 2),
       time_major=st.booleans())
def test_pack_padded_new_dims_every_example(lengths, extra, time_major):
    """New dims every example (ids of dead dims get reused): the cached index always fits."""
    pb = make_padded_batch(lengths, feature=2, extra_time=extra)
    x = dt.Tensor(pb.x.raw.transpose(0, 1), (pb.time, pb.batch, pb.feature)) if time_major else pb.x
    y, pack = dt.pack_padded(x, dims=(pb.batch, pb.time))
    assert pack.size == sum(lengths)
    expected = torch.cat([pb.x.raw[b, :n] for b, n in enumerate(lengths)])
    torch.testing.assert_close(y.raw, expected)


# ---- packing per row: lengths that vary over a dim not being packed ---------------------------------------

def _hyps_batch(pad, extra=0):
    """x over (batch, hyps, time, feature), time's lengths over (batch, hyps), padding `pad`."""
    batch, hyps, f = dt.Dim(None, name="batch"), dt.Dim(3, name="hyps"), dt.Dim(2, name="f")
    lengths = torch.tensor([[3, 1, 0], [0, 2, 4]])
    time = dt.Dim(dt.Tensor(lengths, (batch, hyps)), name="time")
    g = torch.Generator().manual_seed(0)
    raw = torch.randn(2, 3, 4 + extra, 2, generator=g)
    for b in range(2):
        for h in range(3):
            raw[b, h, lengths[b, h]:] = pad
    return batch, hyps, time, f, lengths, dt.Tensor(raw, (batch, hyps, time, f), feature_dim=f)


@pytest.mark.parametrize("pad", [float("nan"), 1e30])
@pytest.mark.parametrize("extra", [0, 2])
def test_pack_padded_per_row(pad, extra):
    """Packing (hyps, time) with time's lengths over (batch, hyps): each batch entry packs its own valid frames,
    hyp after hyp; pack lengths per batch entry; forward and backward; unpack is the inverse."""
    batch, hyps, time, f, lengths, x = _hyps_batch(pad, extra)
    y, pack = dt.pack_padded(x, dims=(hyps, time))
    counts = lengths.sum(1)
    assert pack.lengths.dims == (batch,) and pack.lengths.raw.tolist() == counts.tolist()
    assert y.dims == (batch, pack, f) and y.feature_dim is f

    def oracle(r):
        rows = [torch.cat([r[b, h, :lengths[b, h]] for h in range(3)]) for b in range(2)]
        n = int(counts.max())
        return torch.stack([torch.cat([row, row.new_zeros(n - row.shape[0], 2)]) for row in rows])

    check_against_torch(lambda t: dt.pack_padded(t, dims=(hyps, time), out_dim=pack)[0], oracle, [x])
    back = dt.unpack_padded(y, dims=(hyps, time), in_dim=pack)
    assert back.dims == (batch, hyps, time, f)
    valid = torch.arange(4)[None, None, :] < lengths[:, :, None]
    torch.testing.assert_close(back.raw[valid], x.raw[:, :, :4][valid])
    assert bool((back.raw[~valid] == 0).all())
    check_against_torch(lambda t: dt.unpack_padded(t, dims=(hyps, time), in_dim=pack), lambda r: torch.where(
        valid[:, :, :, None], oracle_unpack(r, lengths), 0.0), [y])
    # time-major x: the same packing
    xt = x.copy_transpose((time, f, hyps, batch))
    yt, _ = dt.pack_padded(xt, dims=(hyps, time), out_dim=pack)
    torch.testing.assert_close(yt.raw_aligned((batch, pack, f)), y.raw, equal_nan=True)


def oracle_unpack(r, lengths):
    """(batch, pack, f) -> (batch, hyps, time, f), each batch entry's frames back at its hyps' valid frames."""
    out = r.new_zeros(2, 3, 4, r.shape[2])
    rows = []
    for b in range(2):
        k, hs = 0, []
        for h in range(3):
            n = int(lengths[b, h])
            hs.append(torch.cat([r[b, k:k + n], r.new_zeros(4 - n, r.shape[2])]))
            k += n
        rows.append(torch.stack(hs))
    return torch.stack(rows) + out


def test_pack_padded_per_row_batch_independence_and_errors():
    batch, hyps, time, f, lengths, x = _hyps_batch(float("nan"))
    y, pack = dt.pack_padded(x, dims=(hyps, time))
    for b in range(2):
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(lengths[b:b + 1], (b1, hyps)), name="t1")
        n = int(lengths[b].max())
        alone, p1 = dt.pack_padded(dt.Tensor(x.raw[b:b + 1, :, :n], (b1, hyps, t1, f)), dims=(hyps, t1))
        k = int(lengths[b].sum())
        assert p1.lengths.raw.tolist() == [k]
        torch.testing.assert_close(alone.raw[0, :k], y.raw[b, :k])
    # only time packed: each (batch, hyp) row keeps its frames
    yt, pt = dt.pack_padded(x, dims=(time,))
    assert yt.dims == (batch, hyps, pt, f) and pt.lengths.raw.tolist() == lengths.tolist()
    with pytest.raises(ValueError, match=r"dimtorch\.pack_padded\(\): 'p'\[batch\] does not have the valid-frame "
                                         r"counts \[4, 6\] per row of \('batch'\(\?\)\) as lengths"):
        dt.pack_padded(x, dims=(hyps, time), out_dim=dt.Dim(dt.Tensor(torch.tensor([4, 5]), (batch,)), name="p"))
    q = dt.Dim(dt.Tensor(torch.tensor([4, 5]), (batch,)), name="q")
    with pytest.raises(ValueError, match=r"dimtorch\.unpack_padded\(\): 'q'\[batch\] does not have the valid-frame "
                                         r"counts \[4, 6\]"):
        dt.unpack_padded(dt.Tensor(y.raw, (batch, q, f)), dims=(hyps, time), in_dim=q)


def test_pack_padded_enforce_sorted():
    """RETURNN frontend's enforce_sorted=False is the default (the fast path takes it); True is refused, as in
    RETURNN frontend."""
    pb = make_padded_batch((3, 1))
    a, da = dt.pack_padded(pb.x, dims=(pb.batch, pb.time), enforce_sorted=False)
    b, db = dt.pack_padded(pb.x, dims=(pb.batch, pb.time))
    assert da.size == db.size == 4 and torch.equal(a.raw, b.raw)
    with pytest.raises(NotImplementedError, match=r"dimtorch\.pack_padded\(\): enforce_sorted=True"):
        dt.pack_padded(pb.x, dims=(pb.batch, pb.time), enforce_sorted=True)
