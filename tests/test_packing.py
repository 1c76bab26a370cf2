"""Tests of python/dimtorch/_packing.py: pack_padded / unpack_padded against torch, sizes from host lengths."""
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
    with pytest.raises(ValueError, match=r"dimtorch\.pack_padded\(\): the lengths of 'time'\[batch\] vary over "
                                         r"'batch'\(\?\), which is not in dims \('time'\[batch\]\)"):
        dt.pack_padded(pb.x, dims=(pb.time,))
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
