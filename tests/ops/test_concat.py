"""Tests of python/dimtorch/ops/concat.py: concat of static dims (torch.cat) and of dynamic dims (sequence by sequence)."""
import pytest
import torch
from hypothesis import given, strategies as st

import dimtorch as dt
from helpers import PAD_LARGE, check_against_torch, grads_of, make_padded_batch


def seq_concat(parts, n_out):
    """Positional oracle: per sequence b, the valid frames of each part one after the other, padded
    with zeros to n_out. `parts`: (raw (batch, time, feat), host lengths) pairs."""
    out = []
    for b in range(parts[0][0].shape[0]):
        frames = torch.cat([raw[b, :lens[b]] for raw, lens in parts], dim=0)
        out.append(torch.cat([frames, frames.new_zeros(n_out - frames.shape[0], frames.shape[1])], dim=0))
    return torch.stack(out)


def test_concat_static_feature_dims_other_order():
    pb = make_padded_batch((4, 2), feature=3)
    g = dt.Dim(5, name="g")
    y = dt.Tensor(torch.randn(4, 2, 5), (pb.time, pb.batch, g))
    out, d = dt.concat((pb.x, pb.feature), (y, g))
    assert d.size == 8 and out.dims == (pb.batch, pb.time, d)
    check_against_torch(lambda a, b: dt.concat((a, pb.feature), (b, g), out_dim=d)[0],
                        lambda a, b: torch.cat([a, b.transpose(0, 1)], dim=2), [pb.x, y])


def test_concat_dynamic_time():
    a = make_padded_batch((4, 2, 0, 1), feature=3, extra_time=1)
    u = dt.Dim(dt.Tensor(torch.tensor([1, 3, 2, 0]), (a.batch,)), name="u")
    g = torch.Generator().manual_seed(1)
    y_raw = torch.randn(4, 3, 3, generator=g)
    y_raw[0, 1:] = float("nan")
    y_raw[2, 2:] = PAD_LARGE
    y_raw[3, :] = float("nan")
    y = dt.Tensor(y_raw, (a.batch, u, a.feature))
    out, d = dt.concat((a.x, a.time), (y, u))
    assert d is a.time + u
    assert d.lengths.raw.tolist() == [5, 5, 2, 1] and out.dims == (a.batch, d, a.feature)
    assert out.raw.shape == (4, 5, 3)
    valid = torch.arange(5)[None, :] < torch.tensor([5, 5, 2, 1])[:, None]
    assert (out.raw[~valid] == 0).all(), "padding of the output is zero"
    lens_x, lens_y = [4, 2, 0, 1], [1, 3, 2, 0]
    check_against_torch(lambda p, q: dt.concat((p, a.time), (q, u))[0],
                        lambda p, q: seq_concat([(p, lens_x), (q, lens_y)], 5), [a.x, y], mask_padding=False)
    # Padding of the inputs gets no gradient.
    _, _, grad = grads_of(lambda p: dt.concat((p, a.time), (y, u))[0], a.x)
    assert (grad[:, 4:] == 0).all() and (grad[1, 2:] == 0).all() and (grad[2] == 0).all()


def test_concat_dynamic_with_static_and_other_order():
    a = make_padded_batch((3, 1), feature=2)
    p = dt.Dim(2, name="prefix")
    y = dt.Tensor(torch.randn(2, 2, 2), (p, a.batch, a.feature))  # other dims order than x
    out, d = dt.concat((y, p), (a.x, a.time))
    assert out.dims == (d, a.batch, a.feature) and d.lengths.raw.tolist() == [5, 3]
    check_against_torch(
        lambda q, r: dt.concat((q, p), (r, a.time))[0],
        lambda q, r: seq_concat([(q.transpose(0, 1), [2, 2]), (r, [3, 1])], 5).transpose(0, 1),
        [y, a.x], mask_padding=False)


def test_concat_three_sources_same_dim():
    a = make_padded_batch((3, 0, 2), feature=2)
    out, d = dt.concat((a.x, a.time), (a.x * 2.0, a.time), (a.x, a.time))
    assert d.lengths.raw.tolist() == [9, 0, 6]
    check_against_torch(lambda q: dt.concat((q, a.time), (q * 2.0, a.time), (q, a.time))[0],
                        lambda q: seq_concat([(q, [3, 0, 2]), (q * 2.0, [3, 0, 2]), (q, [3, 0, 2])], 9),
                        [a.x], mask_padding=False)


def test_concat_batch_independence():
    a = make_padded_batch((4, 2, 0, 1), feature=3, extra_time=2)
    out, d = dt.concat((a.x, a.time), (a.x * -1.0, a.time))
    for b, n in enumerate(a.lengths):
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        x1 = dt.Tensor(a.x.raw[b:b + 1, :n], (b1, t1, a.feature))
        o1, d1 = dt.concat((x1, t1), (x1 * -1.0, t1))
        assert d1.lengths.raw.tolist() == [2 * n]
        torch.testing.assert_close(o1.raw, out.raw[b:b + 1, :2 * n])


def test_concat_errors():
    a = make_padded_batch((3, 1), feature=2)
    g = dt.Dim(3, name="g")
    y = dt.Tensor(torch.randn(2, 3), (a.batch, g))
    with pytest.raises(ValueError, match=r"dimtorch\.concat\(\): the dims other than the concat dim differ: "
                                         r"source 0 has \('batch'\(\?\), 'feature'\(2\)\) besides 'time'\[batch\], "
                                         r"source 1 has \('batch'\(\?\)\) besides 'g'\(3\)"):
        dt.concat((a.x, a.time), (y, g))
    other_batch = dt.Tensor(torch.randn(3, 3, 2), (a.batch, g, a.feature))
    with pytest.raises(ValueError, match=r"dimtorch\.concat\(\): dim 'batch'\(\?\) has size 2 in source 0 but 3 in source 1"):
        dt.concat((a.x, a.time), (other_batch, g))
    with pytest.raises(ValueError, match=r"dimtorch\.concat\(\): source 1's dim 'g'\(3\) is not a dim of source 1's tensor"):
        dt.concat((a.x, a.time), (a.x, g))
    with pytest.raises(ValueError, match=r"dimtorch\.concat\(\): out_dim 'wrong'\(5\) does not match the sum "
                                         r"of 'feature'\(2\), 'feature'\(2\) \('feature\+feature'\(4\)\)"):
        dt.concat((a.x, a.feature), (a.x, a.feature), out_dim=dt.Dim(5, name="wrong"))
    u = dt.Dim(dt.Tensor(torch.tensor([1, 1]), (a.batch,)), name="u")
    with pytest.raises(ValueError, match=r"dimtorch\.concat\(\): out_dim 'u'\[batch\] does not match the sum"):
        dt.concat((a.x, a.time), (a.x, a.time), out_dim=u)


def test_concat_dims_with_sizes_from_data():
    f = dt.Dim(2, name="f")
    b1, b2 = dt.Dim(None, name="b1"), dt.Dim(None, name="b2")
    x, y = dt.Tensor(torch.randn(3, 2), (b1, f)), dt.Tensor(torch.randn(2, 2), (f, b2))
    out, d = dt.concat((x, b1), (y, b2))
    assert d.size is None and d.lengths is None and out.dims == (d, f)
    check_against_torch(lambda p, q: dt.concat((p, b1), (q, b2), out_dim=d)[0],
                        lambda p, q: torch.cat([p, q.t()]), [x, y])


@given(st.lists(st.integers(0, 4), min_size=1, max_size=4), st.lists(st.integers(0, 4), min_size=1, max_size=4),
       st.integers(0, 2))
def test_concat_dynamic_fuzz(lens_x, lens_y, extra):
    n = min(len(lens_x), len(lens_y))
    lens_x, lens_y = lens_x[:n], lens_y[:n]
    a = make_padded_batch(lens_x if max(lens_x) else lens_x[:-1] + [1], feature=2, extra_time=extra)
    lens_x = a.lengths
    u = dt.Dim(dt.Tensor(torch.tensor(lens_y), (a.batch,)), name="u")
    y = dt.Tensor(torch.randn(n, max(lens_y) + extra, 2), (a.batch, u, a.feature))
    out, d = dt.concat((a.x, a.time), (y, u))
    sums = [p + q for p, q in zip(lens_x, lens_y)]
    assert d.lengths.raw.tolist() == sums and out.raw.shape[1] == max(sums)
    check_against_torch(lambda p, q: dt.concat((p, a.time), (q, u))[0],
                        lambda p, q: seq_concat([(p, lens_x), (q, lens_y)], max(sums)), [a.x, y],
                        mask_padding=False)


def test_concat_fast_path_matches_the_python_definition():
    """Static concat dims, same layout otherwise: one C++ torch.cat; equal to _concat.concat."""
    from dimtorch.ops import concat as _concat
    b, t = dt.Dim(None, name="b"), dt.Dim(5, name="t")
    f1, f2 = dt.Dim(3, name="f1"), dt.Dim(4, name="f2")
    x = dt.Tensor(torch.randn(2, 5, 3, requires_grad=True), (b, t, f1), feature_dim=f1)
    y = dt.Tensor(torch.randn(2, 5, 4), (b, t, f2))
    fast, out = dt.concat((x, f1), (y, f2))
    slow, out2 = _concat.concat((x, f1), (y, f2))
    assert out is out2 is f1 + f2 and fast.dims == slow.dims == (b, t, out)
    assert torch.equal(fast.raw, slow.raw) and fast.feature_dim is None
    given = dt.Dim(7, name="f")
    assert dt.concat((x, f1), (y, f2), out_dim=given)[1] is given
    with pytest.raises(ValueError, match=r"dimtorch\.concat\(\): out_dim"):
        dt.concat((x, f1), (y, f2), out_dim=dt.Dim(8, name="wrong"))


def test_concat_dynamic_index_is_cached_per_out_dim_and_layout():
    """The gather index is built once per (out dim, layout); another raw size or layout gets its own."""
    from dimtorch.ops import concat as _concat
    a = make_padded_batch((4, 2, 0, 1), feature=3, extra_time=1)
    u = dt.Dim(dt.Tensor(torch.tensor([1, 3, 2, 0]), (a.batch,)), name="u")
    y = dt.Tensor(torch.randn(4, 3, 3), (a.batch, u, a.feature))
    first, d = dt.concat((a.x, a.time), (y, u))
    again, _ = dt.concat((a.x, a.time), (y, u))
    assert torch.equal(first.raw.nan_to_num(), again.raw.nan_to_num()) and len(_concat._INDEX_CACHE[d]) == 1
    lens_x, lens_y = [4, 2, 0, 1], [1, 3, 2, 0]
    # Longer raw time axes (more padding): other offsets into the joined raws.
    longer = make_padded_batch(lens_x, feature=3, extra_time=3, dims=(a.batch, a.time, a.feature))
    check_against_torch(lambda p, q: dt.concat((p, a.time), (q, u))[0],
                        lambda p, q: seq_concat([(p, lens_x), (q, lens_y)], 5), [longer.x, y], mask_padding=False)
    # Time-major: the index laid out for the other dims order.
    xt, yt = a.x.copy_transpose((a.time, a.feature, a.batch)), y.copy_transpose((u, a.feature, a.batch))
    check_against_torch(lambda p, q: dt.concat((p, a.time), (q, u))[0],
                        lambda p, q: seq_concat([(p.permute(2, 0, 1), lens_x), (q.permute(2, 0, 1), lens_y)],
                                                5).permute(1, 2, 0), [xt, yt], mask_padding=False)
    assert len(_concat._INDEX_CACHE[d]) == 3
    # A given out_dim with the same lengths shares the entry of the canonical dim.
    same = dt.Dim(dt.Tensor(torch.tensor([5, 5, 2, 1]), (a.batch,)), name="same")
    out, d2 = dt.concat((a.x, a.time), (y, u), out_dim=same)
    assert d2 is same and torch.equal(out.raw.nan_to_num(), first.raw.nan_to_num())
    assert len(_concat._INDEX_CACHE[d]) == 3 and same not in _concat._INDEX_CACHE


@pytest.mark.parametrize("layout", ["batch_major", "time_major", "static_prefix", "longer_raw"])
def test_concat_fast_path_dynamic_matches_the_python_definition(layout):
    """Dynamic concat dims, same layout otherwise: one C++ cat + gather by the cached index."""
    from dimtorch.ops import concat as _concat
    a = make_padded_batch((4, 2, 0, 1), feature=3, extra_time=2 if layout == "longer_raw" else 0,
                          pad_value=PAD_LARGE)
    u = dt.Dim(dt.Tensor(torch.tensor([1, 3, 2, 0]), (a.batch,)), name="u")
    y = dt.Tensor(torch.randn(4, 3, 3), (a.batch, u, a.feature))
    x = a.x
    if layout == "time_major":
        x, y = x.copy_transpose((a.time, a.feature, a.batch)), y.copy_transpose((u, a.feature, a.batch))
    elif layout == "static_prefix":
        u = dt.Dim(2, name="prefix")
        y = dt.Tensor(torch.randn(4, 2, 3), (a.batch, u, a.feature))
    for _ in range(2):  # the second call takes the cached index
        fast, d = dt.concat((x, a.time), (y, u))
        slow, d2 = _concat.concat((x, a.time), (y, u))
        assert d is d2 and fast.dims == slow.dims and fast.raw.shape == fast.shape
        assert torch.equal(fast.raw, slow.raw) and fast.feature_dim is slow.feature_dim
    check_against_torch(lambda p, q: dt.concat((p, a.time), (q, u))[0],
                        lambda p, q: _concat.concat((dt.Tensor(p, x.dims), a.time), (dt.Tensor(q, y.dims), u))[0].raw,
                        [x, y], mask_padding=False)


def test_concat_fast_path_dynamic_errors_come_from_the_python_definition():
    a = make_padded_batch((3, 1), feature=2)
    other = dt.Dim(None, name="other")
    u = dt.Dim(dt.Tensor(torch.tensor([1]), (other,)), name="u")
    y = dt.Tensor(torch.randn(2, 1, 2), (a.batch, u, a.feature))
    with pytest.raises(ValueError, match=r"dimtorch\.concat\(\): the lengths of 'u'\[other\] vary over 'other'\(\?\), "
                                         r"which is not a dim of the tensors \('batch'\(\?\), 'feature'\(2\)\)"):
        dt.concat((a.x, a.time), (y, u))


def test_concat_dynamic_reads_nothing_from_the_device():
    """On the meta device (any read of device values raises), under bench/check_syncs.py's
    CopyCounter: the index is copied once without blocking, then taken from the cache."""
    import importlib.util
    import pathlib
    spec = importlib.util.spec_from_file_location(
        "check_syncs", pathlib.Path(__file__).resolve().parents[2] / "bench" / "check_syncs.py")
    check_syncs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_syncs)
    b, f = dt.Dim(None, name="batch"), dt.Dim(4, name="f")
    t = dt.Dim(dt.Tensor(torch.tensor([5, 3, 4]), (b,)), name="time")
    u = dt.Dim(dt.Tensor(torch.tensor([1, 2, 0]), (b,)), name="u")
    x = dt.Tensor(torch.randn(3, 5, 4, device="meta"), (b, t, f))
    y = dt.Tensor(torch.randn(3, 2, 4, device="meta"), (b, u, f))
    for copies in (1, 0):
        with check_syncs.CopyCounter() as c:
            out, d = dt.concat((x, t), (y, u))
        assert out.raw.device.type == "meta" and out.raw.shape == (3, 6, 4)
        assert c.blocking == 0 and c.copies == copies


def test_cum_concat_step_appends_after_each_sequence():
    """cum_concat_step: the frame goes after each sequence's last frame; out dim axis + 1 by dim math."""
    from helpers import make_padded_batch
    pb = make_padded_batch((3, 1, 0), feature=2, pad_value=float("nan"))
    frame = dt.Tensor(torch.randn(3, 2), (pb.batch, pb.feature))
    y, out = dt.cum_concat_step(frame, prev_accum=pb.x, axis=pb.time)
    assert out is pb.time + 1 and out.lengths.raw.tolist() == [4, 2, 1]
    raw = y.raw_aligned((pb.batch, out, pb.feature))
    for b, n in enumerate((3, 1, 0)):
        torch.testing.assert_close(raw[b, :n], pb.x.raw[b, :n])
        torch.testing.assert_close(raw[b, n], frame.raw[b])
    lengths = (3, 1, 0)

    def oracle(prev, new):  # per sequence: its frames, then the new one
        out = torch.zeros(3, 4, 2)
        rows = [torch.cat((prev[b, :n], new[b:b + 1])) for b, n in enumerate(lengths)]
        return torch.stack([torch.nn.functional.pad(r, (0, 0, 0, 4 - r.shape[0])) for r in rows]) + out

    check_against_torch(lambda p, f: dt.cum_concat_step(f, prev_accum=p, axis=pb.time)[0], oracle, [pb.x, frame],
                        out_dims=(pb.batch, out, pb.feature))
    static = dt.Dim(2, name="static")
    y2, out2 = dt.cum_concat_step(frame, prev_accum=dt.Tensor(torch.zeros(3, 2, 2), (pb.batch, static, pb.feature)),
                                  axis=static)
    assert out2.size == 3 and torch.equal(y2.raw_aligned((pb.batch, out2, pb.feature))[:, 2], frame.raw)
    with pytest.raises(ValueError, match=r"dimtorch\.cum_concat_step\(\): source \(one frame\) must not have axis"):
        dt.cum_concat_step(pb.x, prev_accum=pb.x, axis=pb.time)


def test_concat_allow_broadcast_and_rf_options():
    """allow_broadcast=True: each source broadcast over the other dims of the others (RETURNN frontend's
    option), against torch.cat of the expanded raws, forward and backward; handle_dynamic_dims None/True are
    the default, False on a dynamic dim is refused."""
    pb = make_padded_batch((3, 2), pad_value=PAD_LARGE)
    extra = dt.Dim(2, name="extra")
    bias = dt.Tensor(torch.randn(2), (extra,))
    out, dim = dt.concat((pb.x, pb.feature), (bias, extra), allow_broadcast=True)
    assert dim.size == 6 and out.dims == (pb.batch, pb.time, dim)
    check_against_torch(lambda x, b: dt.concat((x, pb.feature), (b, extra), allow_broadcast=True)[0],
                        lambda x, b: torch.cat([x, b.expand(2, 3, 2)], -1), [pb.x, bias])
    with pytest.raises(ValueError, match=r"dimtorch\.concat\(\): the dims other than the concat dim differ"):
        dt.concat((pb.x, pb.feature), (bias, extra))
    assert dt.concat((pb.x, pb.time), (pb.x, pb.time), handle_dynamic_dims=True)[1] is pb.time + pb.time
    with pytest.raises(NotImplementedError, match=r"dimtorch\.concat\(\): handle_dynamic_dims=False"):
        dt.concat((pb.x, pb.time), (pb.x, pb.time), handle_dynamic_dims=False)
