"""Tests of python/dimtorch/ops/masked.py and masked_nested.py: masked_select / masked_scatter against per-sequence
torch (boolean indexing), forward and backward on padded batches, batch independence, the round trip, the nested
forms on a beam-search state, and errors."""
import pytest
import torch
from hypothesis import given, strategies as st

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence, make_padded_batch


def _mask(b, seed=1, p=0.6):
    """Random bool mask over (batch, time), True also in the padding (which must never be selected)."""
    g = torch.Generator().manual_seed(seed)
    return dt.Tensor(torch.rand(b.x.raw.shape[:2], generator=g) < p, (b.batch, b.time))


def _valid(b, m):
    """The selected frames: the mask and the valid frames, as a (batch, time) raw."""
    return m.raw & b.mask


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_masked_select_all_dims(pad):
    b = make_padded_batch((5, 3, 0, 1), pad_value=pad, extra_time=1)
    m = _mask(b)
    sel = _valid(b, m)

    def oracle(x):
        return x[sel]  # (count, feature), sequence after sequence

    out, _ = check_against_torch(lambda x: dt.masked_select(x, mask=m, dims=(b.batch, b.time))[0], oracle, [b.x])
    y, out_dim = dt.masked_select(b.x, mask=m, dims=(b.batch, b.time))
    assert out_dim.size == int(sel.sum()) and y.dims == (out_dim, b.feature) and y.feature_dim is b.feature


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_masked_select_per_sequence(pad, order):
    """dims (time,) of a mask over (batch, time): each sequence packs its own frames; out lengths per sequence."""
    b = make_padded_batch((5, 3, 0, 1), pad_value=pad, extra_time=1)
    m = _mask(b)
    sel = _valid(b, m)
    counts = sel.sum(1)
    x = b.x.copy_transpose(tuple(b.x.dims[i] for i in order))
    y, out_dim = dt.masked_select(x, mask=m, dims=(b.time,))
    assert out_dim.lengths.dims == (b.batch,) and out_dim.lengths.raw.tolist() == counts.tolist()
    assert y.dims == (b.batch, out_dim, b.feature)
    inv = [order.index(i) for i in range(3)]

    def oracle(r):
        r = r.permute(inv)
        rows = [torch.cat([r[i][sel[i]], r.new_zeros(int(counts.max()) - int(counts[i]), r.shape[2])])
                for i in range(r.shape[0])]
        return torch.stack(rows)

    check_against_torch(lambda t: dt.masked_select(t, mask=m, dims=(b.time,))[0], oracle, [x])
    # padding of the result is 0
    lengths = out_dim.lengths.raw
    for i, n in enumerate(lengths.tolist()):
        assert bool((y.raw[i, n:] == 0).all())


def test_masked_select_batch_independence():
    """Each sequence alone (its own dims, cut to its length) packs to what it packs inside the batch, and scatters
    back to the same frames."""
    b = make_padded_batch((5, 3, 0, 1), pad_value=PAD_NAN, extra_time=1)

    def fn(x, dim_map):
        mask = dt.gather(x, indices=0, axis=b.feature) > 0.0
        y, out_dim = dt.masked_select(x, mask=mask, dims=(dim_map(b.time),))
        return y, out_dim, dt.masked_scatter(y, mask=mask, dims=(dim_map(b.time),), in_dim=out_dim)

    y, out_dim, back = fn(b.x, lambda d: d)
    check_batch_independence(lambda x, dim_map: fn(x, dim_map)[2], b.x, b.batch, b.time)
    for i, n in enumerate(b.lengths):
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        alone = dt.Tensor(b.x.raw[i:i + 1, :n], (b1, t1, b.feature))
        y1, out1, _ = fn(alone, {b.time: t1}.get)
        k = int(out_dim.lengths.raw[i])
        assert out1.lengths.raw.tolist() == [k]
        torch.testing.assert_close(y1.raw[0, :k], y.raw[i, :k])


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_masked_scatter_round_trip(pad):
    b = make_padded_batch((5, 3, 0, 1), pad_value=pad, extra_time=1)
    m = _mask(b)
    sel = _valid(b, m)
    for dims in ((b.batch, b.time), (b.time,)):
        y, out_dim = dt.masked_select(b.x, mask=m, dims=dims)
        back = dt.masked_scatter(y, mask=m, dims=dims, in_dim=out_dim)
        assert set(back.dims) == set(b.x.dims)
        expected = torch.where(sel[:, :, None], b.x.raw, 0.0)
        torch.testing.assert_close(back.raw_aligned(b.x.dims), expected)
        # with a backup: unselected frames (padding included) take it
        backup = dt.Tensor(torch.full((4,), -2.0), (b.feature,))
        back = dt.masked_scatter(y, backup, mask=m, dims=dims, in_dim=out_dim)
        torch.testing.assert_close(back.raw_aligned(b.x.dims), torch.where(sel[:, :, None], b.x.raw, -2.0))


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_masked_scatter_against_torch(pad):
    """Forward and backward of masked_scatter (source and backup) against torch's masked_scatter per sequence."""
    b = make_padded_batch((5, 3, 0, 1), pad_value=pad, extra_time=1)
    m = _mask(b)
    sel = _valid(b, m)
    counts = sel.sum(1)
    packed = dt.Dim(dt.Tensor(counts, (b.batch,)), name="packed")
    g = torch.Generator().manual_seed(3)
    src_raw = torch.randn(4, int(counts.max()), 4, generator=g)
    for i, n in enumerate(counts.tolist()):
        src_raw[i, n:] = pad
    source = dt.Tensor(src_raw, (b.batch, packed, b.feature))
    backup = dt.Tensor(torch.randn(4, b.x.raw.shape[1], 4, generator=g), (b.batch, b.time, b.feature))

    def oracle(s, bk):
        rows = []
        for i in range(s.shape[0]):
            rows.append(bk[i].masked_scatter(sel[i][:, None].expand(bk.shape[1:]), s[i, :int(counts[i])]))
        return torch.stack(rows)

    check_against_torch(lambda s, bk: dt.masked_scatter(s, bk, mask=m, dims=(b.time,), in_dim=packed),
                        oracle, [source, backup], out_dims=(b.batch, b.time, b.feature))
    # all dims: a static packed dim
    flat = dt.Dim(int(counts.sum()), name="flat")
    src_flat = dt.Tensor(torch.randn(int(counts.sum()), 4, generator=g), (flat, b.feature))
    check_against_torch(lambda s, bk: dt.masked_scatter(s, bk, mask=m, dims=(b.batch, b.time), in_dim=flat),
                        lambda s, bk: bk.masked_scatter(sel[:, :, None].expand(bk.shape), s),
                        [src_flat, backup], out_dims=(b.batch, b.time, b.feature))


def test_masked_select_given_out_dim_reads_nothing_and_is_checked_on_cpu():
    b = make_padded_batch((5, 3, 1), pad_value=PAD_NAN)
    m = _mask(b)
    y, out_dim = dt.masked_select(b.x, mask=m, dims=(b.time,))
    again, same = dt.masked_select(b.x * 2.0, mask=m, dims=(b.time,), out_dim=out_dim)
    assert same is out_dim
    torch.testing.assert_close(again.raw, y.raw * 2.0)
    flat_y, flat_dim = dt.masked_select(b.x, mask=m, dims=(b.batch, b.time))
    again, _ = dt.masked_select(b.x, mask=m, dims=(b.batch, b.time), out_dim=flat_dim)
    torch.testing.assert_close(again.raw, flat_y.raw)
    with pytest.raises(ValueError, match=r"dimtorch.masked_select\(\): mask holds \d+ selected entries, but out_dim "
                                         r"'wrong'\(\d+\) has \d+"):
        dt.masked_select(b.x, mask=m, dims=(b.batch, b.time), out_dim=dt.Dim(flat_dim.size + 1, name="wrong"))
    wrong = dt.Dim(dt.Tensor(out_dim.lengths.raw + 1, (b.batch,)), name="wrong")
    with pytest.raises(ValueError, match=r"dimtorch.masked_select\(\): mask holds \d+ selected entries in row 0 of "
                                         r"\('batch'\(\?\)\), but out_dim 'wrong'\[batch\] has \d+"):
        dt.masked_select(b.x, mask=m, dims=(b.time,), out_dim=wrong)


def test_masked_errors():
    b = make_padded_batch((5, 3, 1))
    m = _mask(b)
    other = dt.Dim(2, name="other")
    cases = [
        (lambda: dt.masked_select(b.x, mask=dt.Tensor(m.raw.float(), m.dims), dims=(b.time,)),
         TypeError, r"dimtorch.masked_select\(\): mask must be a bool Tensor, got float32"),
        (lambda: dt.masked_select(b.x, mask=m, dims=()), ValueError, r"dimtorch.masked_select\(\): dims is empty"),
        (lambda: dt.masked_select(b.x, mask=m, dims=(other,)), ValueError,
         r"dimtorch.masked_select\(\): dims entry 'other'\(2\) is not a dim of mask \(mask dims: 'batch'"),
        (lambda: dt.masked_select(b.x, mask=m, dims=(b.batch,)), ValueError,
         r"dimtorch.masked_select\(\): mask dim .*time.* is dynamic and not in dims"),
        (lambda: dt.masked_select(b.x.raw, mask=m, dims=(b.time,)), TypeError,
         r"dimtorch.masked_select\(\): tensor must be a dimtorch.Tensor, got Tensor"),
        (lambda: dt.masked_select(dt.Tensor(torch.zeros(3, 7), (b.batch, b.time)), mask=m, dims=(b.time,)),
         ValueError, r"dimtorch.masked_select\(\): dim .*time.* has size 7 in tensor but 5 in mask"),
        (lambda: dt.masked_scatter(b.x, mask=m, dims=(b.time,), in_dim=other), ValueError,
         r"dimtorch.masked_scatter\(\): in_dim 'other'\(2\) is not a dim of source"),
        (lambda: dt.masked_scatter(b.x, mask=m, dims=(b.time,), in_dim=b.feature), ValueError,
         r"dimtorch.masked_scatter\(\): source has .*time.*, one of the dims it is scattered into"),
    ]
    for call, exc, message in cases:
        with pytest.raises(exc, match=message):
            call()
    y, out_dim = dt.masked_select(b.x, mask=m, dims=(b.time,))
    with pytest.raises(ValueError, match=r"dimtorch.masked_scatter\(\): backup has 'other'\(2\), which is not a dim"):
        dt.masked_scatter(y, dt.Tensor(torch.zeros(2), (other,)), mask=m, dims=(b.time,), in_dim=out_dim)
    flat_y, flat = dt.masked_select(b.x, mask=m, dims=(b.batch, b.time))
    cut = dt.Tensor(flat_y.raw[1:], (dt.Dim(flat.size - 1, name="cut"), b.feature))
    with pytest.raises(ValueError, match=r"dimtorch.masked_scatter\(\): mask holds \d+ selected entries, but in_dim "
                                         r"'cut'"):
        dt.masked_scatter(cut, mask=m, dims=(b.batch, b.time), in_dim=cut.dims[0])


@given(perm=st.permutations([0, 1, 2]), lengths=st.lists(st.integers(0, 5), min_size=1, max_size=4),
       extra=st.integers(0, 2), seed=st.integers(0, 100), pad=st.sampled_from([PAD_NAN, PAD_LARGE]),
       per_sequence=st.booleans())
def test_masked_select_scatter_property(perm, lengths, extra, seed, pad, per_sequence):
    """Any layout of x and of the mask, any lengths: the selected frames in order per sequence (or over the
    whole batch), and the round trip back."""
    b = make_padded_batch(tuple(lengths), feature=2, pad_value=pad, extra_time=extra, seed=seed)
    m = _mask(b, seed=seed)
    sel = _valid(b, m)
    x = b.x.copy_transpose(tuple(b.x.dims[i] for i in perm))
    mask = m.copy_transpose((b.time, b.batch)) if seed % 2 else m
    dims = (b.time,) if per_sequence else (b.batch, b.time)
    y, out_dim = dt.masked_select(x, mask=mask, dims=dims)
    if per_sequence:
        for i in range(len(lengths)):
            n = int(sel[i].sum())
            assert out_dim.lengths.raw[i] == n
            torch.testing.assert_close(y.raw_aligned((b.batch, out_dim, b.feature))[i, :n], b.x.raw[i][sel[i]])
    else:
        torch.testing.assert_close(y.raw_aligned((out_dim, b.feature)), b.x.raw[sel])
    back = dt.masked_scatter(y, mask=mask, dims=dims, in_dim=out_dim)
    torch.testing.assert_close(back.raw_aligned(b.x.dims), torch.where(sel[:, :, None], b.x.raw, 0.0))


# ---- nested forms ----------------------------------------------------------------------------------------


def _beam_state():
    """A beam-search state over (batch, beam): a score, a history of labels over hist (lengths per
    (batch, beam)) and the hist dim itself."""
    batch, beam = dt.Dim(2, name="batch"), dt.Dim(3, name="beam")
    hist_len = torch.tensor([[4, 2, 3], [1, 0, 2]])
    hist = dt.Dim(dt.Tensor(hist_len, (batch, beam)), name="hist")
    g = torch.Generator().manual_seed(0)
    labels_raw = torch.randint(0, 9, (2, 3, 4), generator=g)
    for i in range(2):
        for j in range(3):
            labels_raw[i, j, hist_len[i, j]:] = -1
    state = {"score": dt.Tensor(torch.randn(2, 3, generator=g), (batch, beam)),
             "labels": dt.Tensor(labels_raw, (batch, beam, hist)),
             "hist": hist, "const": dt.Tensor(torch.ones(5), (dt.Dim(5, name="c"),)), "none": None}
    active = dt.Tensor(torch.tensor([[True, False, True], [False, True, True]]), (batch, beam))
    return batch, beam, hist, state, active


def test_masked_select_nested_and_back():
    batch, beam, hist, state, active = _beam_state()
    packed, pack_dim, dim_map = dt.masked_select_nested(state, mask=active, mask_cpu=active, dims=(batch, beam))
    assert pack_dim.size == 4 and packed["none"] is None and packed["const"] is state["const"]
    new_hist = packed["hist"]
    assert dim_map[hist] is new_hist and new_hist.lengths.dims == (pack_dim,)
    assert new_hist.lengths.raw.tolist() == [4, 3, 0, 2]
    assert packed["labels"].dims == (pack_dim, new_hist) and packed["labels"].raw.shape == (4, 4)
    torch.testing.assert_close(packed["score"].raw, state["score"].raw[active.raw])
    for k, (i, j) in enumerate([(0, 0), (0, 2), (1, 1), (1, 2)]):
        n = int(new_hist.lengths.raw[k])
        assert packed["labels"].raw[k, :n].tolist() == state["labels"].raw[i, j, :n].tolist()
    # Scattered back unchanged: the packed dims map back to their old ones, the state comes back.
    same = dt.masked_scatter_nested(packed, state, mask=active, dims=(batch, beam), in_dim=pack_dim,
                                    masked_select_dim_map=dim_map)
    assert same["hist"] is hist and same["labels"].dims[-1] is hist
    valid = torch.arange(4) < hist.lengths.raw[:, :, None]
    torch.testing.assert_close(same["labels"].raw_aligned((batch, beam, hist))[valid], state["labels"].raw[valid])
    torch.testing.assert_close(same["score"].raw_aligned((batch, beam)), state["score"].raw)
    # A step on the packed hypotheses (score + 1, one label appended), then scattered back into the old state.
    step_hist = new_hist + 1
    labels, _ = dt.pad(packed["labels"], axes=new_hist, padding=(0, 1), value=7)
    stepped = {"score": packed["score"] + 1.0, "labels": labels, "hist": step_hist,
               "const": packed["const"], "none": None}
    select_map = dim_map  # hist -> new_hist; step_hist is new in the step, so it is merged with hist
    scatter_map = {}
    back = dt.masked_scatter_nested(stepped, state, mask=active, mask_cpu=active, dims=(batch, beam), in_dim=pack_dim,
                                    masked_select_dim_map=select_map, masked_scatter_dim_map=scatter_map)
    merged = back["hist"]
    assert scatter_map[hist] is merged and merged.lengths.dims == (batch, beam)
    expected_len = torch.where(active.raw, state["hist"].lengths.raw + 1, state["hist"].lengths.raw)
    assert merged.lengths.raw.tolist() == expected_len.tolist()
    torch.testing.assert_close(back["score"].raw_aligned((batch, beam)),
                               torch.where(active.raw, state["score"].raw + 1.0, state["score"].raw))
    labels_back = back["labels"].raw_aligned((batch, beam, merged))
    for i in range(2):
        for j in range(3):
            n_old = int(state["hist"].lengths.raw[i, j])
            old = state["labels"].raw[i, j, :n_old].tolist()
            want = old + [7] if active.raw[i, j] else old
            assert labels_back[i, j, :len(want)].tolist() == want
    assert back["none"] is None


def test_masked_nested_errors():
    batch, beam, hist, state, active = _beam_state()
    with pytest.raises(TypeError, match=r"dimtorch.masked_select_nested\(\): leaves must be Tensors, Dims or None, "
                                        r"got str"):
        dt.masked_select_nested({"x": "text"}, mask=active, dims=(batch, beam))
    packed, pack_dim, dim_map = dt.masked_select_nested(state, mask=active, dims=(batch, beam))
    with pytest.raises(ValueError, match=r"dimtorch.masked_scatter_nested\(\): the trees differ in structure"):
        dt.masked_scatter_nested([packed["score"]], [state["score"], state["score"]], mask=active, dims=(batch, beam),
                                 in_dim=pack_dim, masked_select_dim_map=dim_map)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_masked_select_fast_path_matches_the_python_definition(pad):
    """dimtorch._C.masked_select takes all of the mask's dims leading the tensor in the mask's order (one boolean
    index, the padding of dynamic dims masked out); every other call is the Python definition's."""
    from dimtorch.ops import masked as _masked
    from fast_path_checks import assert_same
    b = make_padded_batch((5, 3, 0, 1), pad_value=pad, extra_time=1)
    m = _mask(b)
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    heads = dt.Dim(2, name="heads")
    x4 = dt.Tensor(torch.stack([b.x.raw, -b.x.raw], dim=-1), b.x.dims + (heads,))
    cases = [dict(tensor=x, mask=m, dims=(b.batch, b.time)),  # the fast path
             dict(tensor=x4, mask=m, dims=(b.batch, b.time)),
             dict(tensor=x.copy_transpose((b.time, b.batch, b.feature)), mask=m, dims=(b.batch, b.time)),  # Python
             dict(tensor=x, mask=m, dims=[b.batch, b.time]),
             dict(tensor=x, mask=m.copy_transpose((b.time, b.batch)), dims=(b.time, b.batch)),
             dict(tensor=x, mask=m, dims=(b.time,)),
             dict(tensor=dt.Tensor(b.x.raw[0], (b.time, b.feature)), mask=m, dims=(b.batch, b.time))]
    for kwargs in cases:
        fast, fast_dim = dt.masked_select(**kwargs)
        slow, slow_dim = _masked.masked_select(**kwargs)
        assert_same((fast, fast_dim), (slow, slow_dim))
    out, dim = dt.masked_select(x, mask=m, dims=(b.batch, b.time))
    assert out.feature_dim is b.feature and dim.size == int(_valid(b, m).sum())
    raw = b.x.raw.clone().requires_grad_(True)
    out, _ = dt.masked_select(dt.Tensor(raw, b.x.dims), mask=m, dims=(b.batch, b.time))
    out.raw.sum().backward()
    torch.testing.assert_close(raw.grad, _valid(b, m)[:, :, None].expand_as(raw).to(raw.dtype))
    with pytest.raises(TypeError, match=r"dimtorch.masked_select\(\): mask must be a bool Tensor"):
        dt.masked_select(x, mask=dt.Tensor(m.raw.int(), m.dims), dims=(b.batch, b.time))


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_masked_scatter_fast_path_matches_the_python_definition(pad):
    """dimtorch._C.masked_scatter takes no backup, the mask's packed dims trailing it, source over (rows, in_dim,
    rest): one gather and one where; other calls (and count mismatches, which it does not judge itself) are the
    Python definition's."""
    from dimtorch.ops import masked as _masked
    from fast_path_checks import assert_same
    b = make_padded_batch((5, 3, 0, 1), pad_value=pad, extra_time=1)
    m = _mask(b)
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    y, per_row = dt.masked_select(x, mask=m, dims=(b.time,))
    flat_y, flat = dt.masked_select(x, mask=m, dims=(b.batch, b.time))
    backup = dt.Tensor(torch.full((4,), -1.0), (b.feature,))
    cases = [dict(source=y, mask=m, dims=(b.time,), in_dim=per_row),  # the fast path
             dict(source=flat_y, mask=m, dims=(b.batch, b.time), in_dim=flat),
             dict(source=y, backup=backup, mask=m, dims=(b.time,), in_dim=per_row),  # Python
             dict(source=y.copy_transpose((per_row, b.batch, b.feature)), mask=m, dims=(b.time,), in_dim=per_row),
             dict(source=y, mask=m, dims=[b.time], in_dim=per_row)]
    for kwargs in cases:
        assert_same(dt.masked_scatter(**kwargs), _masked.masked_scatter(**kwargs))
    back = dt.masked_scatter(y, mask=m, dims=(b.time,), in_dim=per_row)
    assert back.dims == (b.batch, b.time, b.feature) and back.feature_dim is b.feature
    torch.testing.assert_close(back.raw, torch.where(_valid(b, m)[:, :, None], b.x.raw, 0.0))
    cut = dt.Dim(dt.Tensor(per_row.lengths.raw - (per_row.lengths.raw > 0).long(), (b.batch,)), name="cut")
    with pytest.raises(ValueError, match=r"dimtorch.masked_scatter\(\): mask holds \d+ selected entries in row 0"):
        dt.masked_scatter(dt.Tensor(y.raw, (b.batch, cut, b.feature)), mask=m, dims=(b.time,), in_dim=cut)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_masked_select_never_selects_padding_even_where_the_mask_holds(pad):
    """The semantics: the entries where the mask holds AND the frame is valid (a mask's True in the padding of
    a dynamic dim among dims counts as False), for dims with or without the batch dim, so every sequence packs
    as it would alone (RETURNN frontend, with dims=[batch, time], selects such padding frames: the result
    then depends on what the padding holds; with dims=[time] it leaves them out as here). Against positional
    torch on the valid frames only, forward and backward, padding NaN or 1e30."""
    pb = make_padded_batch((4, 1, 3), feature=2, pad_value=pad)
    everywhere = dt.Tensor(torch.ones(3, 4, dtype=torch.bool), (pb.batch, pb.time))  # True on padding too
    out, dim = dt.masked_select(pb.x, mask=everywhere, dims=(pb.batch, pb.time))
    assert dim.size == 8 and out.dims == (dim, pb.feature)
    check_against_torch(lambda x: dt.masked_select(x, mask=everywhere, dims=(pb.batch, pb.time))[0],
                        lambda x: x[pb.mask], [pb.x])
    rows, rows_dim = dt.masked_select(pb.x, mask=everywhere, dims=(pb.time,))
    assert rows_dim.lengths.raw.tolist() == [4, 1, 3]
    assert torch.equal(rows.raw_aligned((pb.batch, rows_dim, pb.feature))[pb.mask], pb.x.raw[pb.mask])
    for b, n in enumerate([4, 1, 3]):  # each sequence alone packs its own frames only
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        x1 = dt.Tensor(pb.x.raw[b:b + 1], (b1, t1, pb.feature))  # the batch's raw time (padding included)
        one, d1 = dt.masked_select(x1, mask=dt.Tensor(torch.ones(1, 4, dtype=torch.bool), (b1, t1)), dims=(b1, t1))
        assert d1.size == n and torch.equal(one.raw, pb.x.raw[b, :n])
