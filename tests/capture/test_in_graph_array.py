"""In-graph forms of the array ops composed in Python (pad, concat, shape ops, slicing, split, sort, scatter, packing) against their eager forms.

Each op's Python definition runs eagerly and under force_in_graph (its in-graph form: masks and
indices from the lengths as tensors, sizes from the raws), forward and backward, on padded batches
whose padding holds NaN or 1e30, in several dims orders; per sequence alone; and on meta raws with
no host read (in_graph_helpers).
"""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dimtorch as dt
from dimtorch._core import tracing as _tracing
from dimtorch.ops.concat import concat
from dimtorch.ops.gather import gather, one_hot, sparse_to_dense
from dimtorch.ops.packing import pack_padded, unpack_padded
from dimtorch.ops.pad import pad
from dimtorch.ops.scatter import scatter
from dimtorch.ops.shape import expand_dim, merge_dims, replace_dim, split_dims, squeeze
from dimtorch.ops.slicing import reverse_sequence, shift_left, shift_right
from dimtorch.ops.slicing import slice as dslice
from dimtorch.ops.sort import cumsum, sort, top_k
from dimtorch.ops.stack import split, stack, unstack
from in_graph_helpers import (check_alone_in_graph, check_in_graph, no_host_reads, on_meta, padded_env, run,
                              run_meta_in_graph, with_order)

ORDERS = [(0, 1, 2), (1, 0, 2), (2, 1, 0), (1, 2, 0)]
lengths_st = st.lists(st.integers(0, 6), min_size=1, max_size=4).filter(lambda ls: max(ls) > 0)


def check_all(fn, env, **kw):
    """check_in_graph, per sequence alone, and no host read on meta raws."""
    pad_value = kw.pop("pad_value", None)
    check_in_graph(fn, env, pad_value=pad_value, **kw)
    check_alone_in_graph(fn, env, **kw)
    run_meta_in_graph(fn, env)


# --- the checker itself ------------------------------------------------------------------------------


def test_no_host_reads_catches_the_eager_forms():
    env = on_meta(padded_env())
    with pytest.raises(AssertionError, match="get_max_size|_dim_cached_raw"):
        with no_host_reads():
            pad(env["x"], axes=env["time"], padding=(1, 1))
    with pytest.raises(AssertionError, match="torch item"):
        with no_host_reads():
            torch.ones(()).item()
    with pytest.raises(AssertionError, match="_gather_index"):
        x = padded_env()
        with no_host_reads():
            concat((x["x"], x["time"]), (x["x"], x["time"]))


def test_force_in_graph_makes_tracing_true_and_restores():
    assert not _tracing.tracing()
    with _tracing.force_in_graph():
        assert _tracing.tracing()
        with _tracing.force_in_graph():
            assert _tracing.tracing()
        assert _tracing.tracing()
    assert not _tracing.tracing()


# --- pad, concat ---------------------------------------------------------------------------------------


@settings(max_examples=15)
@given(lengths=lengths_st, extra=st.integers(0, 2), order=st.sampled_from(ORDERS),
       left=st.integers(0, 3), right=st.integers(0, 3), pad_nan=st.booleans())
def test_pad_constant(lengths, extra, order, left, right, pad_nan):
    env = with_order(padded_env(lengths, extra_time=extra, pad=float("nan") if pad_nan else 1e30), "x", order)
    fn = lambda e: pad(e["x"], axes=e["time"], padding=(left, right), value=7.0)  # noqa: E731
    check_all(fn, env, pad_value=7.0 if left or right else None)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("order", ORDERS)
def test_pad_modes(mode, order):
    env = with_order(padded_env((5, 3, 3, 4), extra_time=2), "x", order)
    fn = lambda e: pad(e["x"], axes=e["time"], padding=(2, 1), value=-2.0, mode=mode)  # noqa: E731
    check_all(fn, env, pad_value=-2.0)


def test_pad_static_and_dynamic_axes_together():
    env = padded_env((4, 0, 2), extra_time=1)
    fn = lambda e: pad(e["x"], axes=(e["feature"], e["time"]), padding=((1, 0), (0, 2)))  # noqa: E731
    check_all(fn, env)


def _concat_env(order):
    env = with_order(padded_env((5, 3, 0, 2), extra_time=1), "x", order)
    b, f = env["batch"], env["feature"]
    env["other"] = other = dt.Dim(dt.Tensor(torch.tensor([2, 0, 3, 1]), (b,)), name="other")
    raw = torch.randn(4, 4, 3)
    raw[0, 2:], raw[1, :], raw[3, 1:] = float("nan"), 1e30, float("nan")
    env["y"] = dt.Tensor(raw, (b, other, f))
    if order[0]:  # y in another order than x
        env["y"] = env["y"].copy_transpose((f, other, b))
    env["two"] = two = dt.Dim(2, name="two")
    env["s"] = dt.Tensor(torch.randn(2, 4, 3), (two, b, f))
    return env


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("parts", [("x", "y"), ("x", "s", "y"), ("s", "x"), ("y", "x", "x")])
def test_concat_dynamic(order, parts):
    env = _concat_env(order)
    dims = {"x": "time", "y": "other", "s": "two"}
    fn = lambda e: concat(*[(e[p], e[dims[p]]) for p in parts])  # noqa: E731
    check_all(fn, env, pad_value=0.0)


def test_concat_given_out_dim_is_not_compared_in_graph():
    env = _concat_env((0, 1, 2))
    t, o = env["time"], env["other"]
    same = dt.Dim((t + o).lengths, name="same")
    fn = lambda e: concat((e["x"], t), (e["y"], o), out_dim=same)  # noqa: E731
    check_in_graph(fn, env)
    with _tracing.force_in_graph(), no_host_reads():
        concat((env["x"], t), (env["y"], o), out_dim=same)


# --- shape ops --------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_split_dims_dynamic(order):
    env = with_order(padded_env((5, 3, 0, 2), extra_time=2), "x", order)

    def ceil(e):
        t = e["time"]
        return split_dims(e["x"], axis=t, dims=(dt.ceildiv(t, 2), dt.Dim(2, name="two")), pad_value=-3.0)

    check_all(ceil, env)
    env = with_order(padded_env((4, 2, 0, 6), extra_time=3), "x", order)
    floor = lambda e: split_dims(e["x"], axis=e["time"], dims=(e["time"] // 2, dt.Dim(2, name="two")))  # noqa: E731
    check_all(floor, env)


@pytest.mark.parametrize("order", ORDERS)
def test_merge_dims_dynamic_first(order):
    env = with_order(padded_env((5, 3, 0, 2), extra_time=2), "x", order)
    check_all(lambda e: merge_dims(e["x"], dims=(e["time"], e["feature"])), env)
    merged = lambda e: merge_dims(e["x"], dims=(e["batch"], e["time"]))  # noqa: E731  (the batch merged away)
    check_in_graph(merged, env)
    run_meta_in_graph(merged, env)


def test_merge_dims_given_out_dim_and_replace_dim_in_graph():
    env = padded_env((5, 3, 0, 2), extra_time=2)
    t, f = env["time"], env["feature"]
    twin = dt.Dim((t * 3).lengths, name="twin")
    other = dt.Dim(t.lengths, name="other")
    for fn in (lambda e: merge_dims(e["x"], dims=(t, f), out_dim=twin),
               lambda e: replace_dim(e["x"], in_dim=t, out_dim=other)):
        check_in_graph(fn, env)  # (dims of this batch: no per-sequence run)
        run_meta_in_graph(fn, env)
    check_all(lambda e: replace_dim(e["x"], in_dim=e["time"]), env)


def test_expand_dim_squeeze_have_no_host_reads():
    env = padded_env((5, 3, 0, 2), extra_time=2)
    one = dt.Dim(1, name="one")
    check_all(lambda e: squeeze(expand_dim(e["x"], one), axis=one), env)


# --- slicing -----------------------------------------------------------------------------------------


@settings(max_examples=20)
@given(lengths=lengths_st, extra=st.integers(0, 2), order=st.sampled_from(ORDERS), start=st.integers(0, 7),
       end=st.one_of(st.none(), st.integers(-8, 9)), step=st.integers(1, 3))
def test_slice_dynamic(lengths, extra, order, start, end, step):
    env = with_order(padded_env(lengths, extra_time=extra), "x", order)
    check_all(lambda e: dslice(e["x"], axis=e["time"], start=start, end=end, step=step), env)


@settings(max_examples=15)
@given(lengths=lengths_st, extra=st.integers(0, 2), order=st.sampled_from(ORDERS), amount=st.integers(0, 8))
def test_shift_left_right_and_reverse(lengths, extra, order, amount):
    env = with_order(padded_env(lengths, extra_time=extra, pad=1e30), "x", order)
    check_all(lambda e: shift_left(e["x"], axis=e["time"], amount=amount, pad_value=-5.0), env)
    check_all(lambda e: shift_right(e["x"], axis=e["time"], amount=amount, pad_value=-5.0), env)
    check_all(lambda e: reverse_sequence(e["x"], axis=e["time"]), env)


# --- split, stack, unstack ---------------------------------------------------------------------------


def _parts_env(order, lengths, parts):
    env = with_order(padded_env(lengths, extra_time=2), "x", order)
    b = env["batch"]
    for name, values in parts.items():
        env[name] = dt.Dim(dt.Tensor(torch.tensor(values), (b,)), name=name)
    env["two"] = dt.Dim(2, name="two")
    return env


@pytest.mark.parametrize("order", ORDERS)
def test_split_dynamic(order):
    env = _parts_env(order, (5, 3, 0, 2), {"A": [2, 1, 0, 2], "B": [3, 2, 0, 0]})
    check_all(lambda e: split(e["x"], axis=e["time"], out_dims=(e["A"], e["B"])), env)
    env = _parts_env(order, (5, 3, 2, 4), {"A": [1, 1, 0, 2], "B": [2, 0, 0, 0]})
    check_all(lambda e: split(e["x"], axis=e["time"], out_dims=(e["two"], e["A"], e["B"])), env)
    check_all(lambda e: split(e["x"], axis=e["time"], out_dims=(e["A"], e["two"], e["B"])), env)


def test_split_undoes_concat_in_graph():
    env = padded_env((5, 3, 0, 2), extra_time=1)

    def roundtrip(e):
        t = e["time"]
        y, od = concat((e["x"], t), (e["x"] * 2.0, t))
        return split(y, axis=od, out_dims=(t, t))

    out, _, _ = run(roundtrip, env, True)
    check_in_graph(roundtrip, env)
    mask = torch.arange(out[0].raw.shape[1]) < torch.tensor([5, 3, 0, 2])[:, None]
    torch.testing.assert_close(out[1].raw.detach()[mask], 2 * out[0].raw.detach()[mask])


def test_stack_and_unstack_in_graph():
    env = padded_env((5, 3, 0, 2), extra_time=2)
    check_all(lambda e: stack([e["x"], e["x"] * 2.0]), env)
    eager, _, _ = run(lambda e: unstack(e["x"], axis=e["time"]), env, False)
    graph, _, _ = run(lambda e: unstack(e["x"], axis=e["time"]), env, True)
    assert len(eager) == 5 and len(graph) == 7  # in graph, one per raw position
    for e, g in zip(eager, graph):
        torch.testing.assert_close(g.raw, e.raw, equal_nan=True)
    with _tracing.force_in_graph(), no_host_reads():
        unstack(on_meta(env)["x"], axis=env["time"])


# --- top_k, sort, cumsum -----------------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_top_k_sort_cumsum(order):
    env = with_order(padded_env((5, 3, 0, 2), extra_time=2, pad=1e30), "x", order)
    for k in (1, 3, 9):
        check_all(lambda e: top_k(e["x"], axis=e["time"], k=k), env)
    for descending in (False, True):
        check_all(lambda e: sort(e["x"], axis=e["time"], descending=descending), env)
    check_all(lambda e: cumsum(e["x"], axis=e["time"]), env)
    # Every sequence has >= k valid entries over (time, feature): no tie among padding decides.
    env = with_order(padded_env((5, 3, 1, 2), extra_time=2, pad=float("nan")), "x", order)
    check_all(lambda e: top_k(e["x"], axis=(e["time"], e["feature"]), k=3), env)
    check_all(lambda e: top_k(e["x"], axis=e["time"], k=dt.Dim(1, name="k1")), env)


# --- gather, one_hot, sparse_to_dense, scatter -------------------------------------------------------


def _index_env(order):
    env = with_order(padded_env((5, 3, 0, 2), extra_time=2), "x", order)
    b, t = env["batch"], env["time"]
    env["out"] = out = dt.Dim(4, name="out")
    idx = torch.randint(0, 4, (4, 7), generator=torch.Generator().manual_seed(1))
    idx[0, 5:], idx[1, 3:], idx[3, 2:] = 99, -7, 1000  # garbage in the padding
    env["i"] = dt.Tensor(idx, (b, t), sparse_dim=out)
    env["j"] = dt.Tensor(idx.clamp(0, 3), (b, t), sparse_dim=out)
    return env


@pytest.mark.parametrize("order", ORDERS)
def test_scatter_dynamic(order):
    env = _index_env(order)
    check_all(lambda e: scatter(e["x"], indices=e["i"], indices_dim=e["time"]), env)
    for in_dims in (("batch", "time"), ("time", "batch")):
        fn = lambda e: scatter(e["x"], indices=e["i"], indices_dim=tuple(e[k] for k in in_dims))  # noqa: E731
        check_in_graph(fn, env)
        run_meta_in_graph(fn, env)


def test_scatter_into_dynamic_out_dim_in_graph():
    """A dynamic out dim made from lengths alone (no tensor over it in the trace) takes the max of its lengths
    read in the graph as its padded size (dimtorch._core.sizes, rule 4): eager's size and values."""
    env = _index_env((0, 1, 2))
    target = dt.Dim(dt.Tensor(torch.tensor([4, 2, 1, 3]), (env["batch"],)), name="target")
    idx = dt.Tensor(env["j"].raw, env["j"].dims, sparse_dim=target)
    eager = scatter(env["x"], indices=idx, indices_dim=env["time"])
    with _tracing.force_in_graph():
        graph = scatter(env["x"], indices=idx, indices_dim=env["time"])
    assert graph.dims == eager.dims
    torch.testing.assert_close(graph.copy_masked(0.0).raw, eager.copy_masked(0.0).raw)


def test_gather_one_hot_sparse_to_dense_have_no_host_reads():
    env = _index_env((0, 1, 2))
    feat_idx = lambda e: dt.Tensor(e["j"].raw % 3, e["j"].dims, sparse_dim=e["feature"])  # noqa: E731
    check_all(lambda e: gather(e["x"], indices=feat_idx(e), axis=e["feature"]), env)
    check_all(lambda e: one_hot(e["j"]), env)
    check_all(lambda e: sparse_to_dense(e["j"], label_value=1.0, other_value=0.0), env)


# --- pack_padded, unpack_padded ------------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("keys", [("batch", "time"), ("time", "batch")])
def test_pack_padded_in_graph_is_valid_frames_first(order, keys):
    env = with_order(padded_env((5, 3, 0, 2), extra_time=2), "x", order)
    fn = lambda e: pack_padded(e["x"], dims=tuple(e[k] for k in keys))  # noqa: E731
    (ey, ed), _, _ = run(fn, env, False)
    (gy, gd), _, _ = run(fn, env, True)
    # Eagerly a static dim of the valid count; in graph a dim over 0-dim lengths holding that count,
    # raw size the product of the raw sizes (the valid frames first, in the same order).
    assert gd.lengths is not None and gd.lengths.dims == () and int(gd.lengths.raw) == ed.size == 10
    assert gy.raw.shape[0] == 4 * 7 and gy.dims[0] is gd and gy.dims[1:] == ey.dims[1:]
    torch.testing.assert_close(gy.raw[:ed.size], ey.raw, equal_nan=True)
    gy.raw[:ed.size].sum().backward()
    run_meta_in_graph(fn, env)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("keys", [("batch", "time"), ("time", "batch")])
def test_unpack_padded_undoes_pack_padded_in_graph(order, keys):
    env = with_order(padded_env((5, 3, 0, 2), extra_time=2), "x", order)

    def roundtrip(e):
        y, pack_dim = pack_padded(e["x"], dims=tuple(e[k] for k in keys))
        return unpack_padded(y * 2.0, dims=tuple(e[k] for k in keys), in_dim=pack_dim)

    check_all(roundtrip, env, pad_value=0.0)


def test_pack_dim_of_0_dim_lengths_works_with_the_ops():
    env = padded_env((5, 3, 0, 2), extra_time=2)
    with _tracing.force_in_graph():
        y, pack_dim = pack_padded(env["x"], dims=(env["batch"], env["time"]))
    total = dt.reduce_sum(y, axis=pack_dim)  # masked: the padding frames hold NaN
    want = torch.nansum(env["x"].raw, dim=(0, 1))
    torch.testing.assert_close(total.raw, want)
    assert pack_dim.get_mask().raw.sum() == 10


def test_pack_unpack_errors_in_graph():
    env = padded_env((5, 3, 0, 2), extra_time=2)
    b, t, f = env["batch"], env["time"], env["feature"]
    with _tracing.force_in_graph():
        with pytest.raises(ValueError, match=r"pack_padded\(\): while tracing, the pack dim"):
            pack_padded(env["x"], dims=(b, t), out_dim=dt.Dim(10, name="pack"))
        own = dt.Dim(dt.Tensor(torch.tensor(10), ()), name="own")
        y, pack_dim = pack_padded(env["x"], dims=(b, t), out_dim=own)
        assert pack_dim is own
        packed = dt.Tensor(torch.randn(10, 3), (dt.Dim(10, name="pack"), f))
        with pytest.raises(ValueError, match=r"unpack_padded\(\): while tracing, in_dim must be a pack dim"):
            unpack_padded(packed, dims=(b, t), in_dim=packed.dims[0])
        t2 = dt.Dim(dt.Tensor(torch.tensor([1, 1, 1, 1]), (b,)), name="t2")
        with pytest.raises(ValueError, match="exactly one dynamic dim"):
            unpack_padded(y, dims=(b, t, t2), in_dim=own)
