"""Tests of dt.audio.specaugment / random_mask / mask (rf.audio.specaugment's): the masks' structure and statistics
(inside each sequence's frames, counts and spans within their bounds, the schedule), repeatability, gradients."""
import pytest
import torch

import dimtorch as dt

LENGTHS = [60, 23, 4, 1, 0]


def batch(lengths=LENGTHS, feature=10, value=1.0):
    b, f = dt.Dim(None, name="batch"), dt.Dim(feature, name="feature")
    t = dt.Dim(dt.Tensor(torch.tensor(lengths), (b,)), name="time")
    raw = torch.full((len(lengths), max(lengths) + 2, feature), value)
    return dt.Tensor(raw, (b, t, f), feature_dim=f), b, t, f


def runs(flags):
    """(start, end) of each run of True in a 1-D bool tensor."""
    out, start = [], None
    for i, v in enumerate(flags.tolist() + [False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            out.append((start, i))
            start = None
    return out


def time_masked(y):
    """(batch, time) bool: frames zeroed over all features (x holds ones)."""
    zero = y.raw == 0
    assert torch.equal(zero.any(-1), zero.all(-1)), "a time mask must cover every feature"
    return zero.all(-1)


@pytest.mark.parametrize("k", [1, 3])
def test_random_mask_fixed_count_of_single_frames(k):
    x, b, t, f = batch()
    for seed in range(20):
        y = dt.audio.random_mask(x, mask_axis=t, broadcast_axis=f, min_num=k, max_num=k, max_dims=1,
                                 generator=torch.Generator().manual_seed(seed))
        assert y.dims == x.dims and y.feature_dim is f
        m = time_masked(y)
        for i, n in enumerate(LENGTHS):
            assert int(m[i].sum()) == min(k, n), (seed, i)  # distinct frames, all inside the sequence
            assert not m[i, n:].any()


def test_random_mask_count_range_per_sequence():
    x, b, t, f = batch()
    hi = dt.Tensor(torch.tensor([5, 3, 4, 1, 0]), (b,))  # per sequence, on the host: its max bounds the slots
    seen = {i: set() for i in range(len(LENGTHS))}
    for seed in range(60):
        y = dt.audio.random_mask(x, mask_axis=t, broadcast_axis=f, min_num=1, max_num=hi, max_dims=1,
                                 generator=torch.Generator().manual_seed(seed))
        for i, c in enumerate(time_masked(y).sum(-1).tolist()):
            seen[i].add(c)
    assert seen[0] == {1, 2, 3, 4, 5} and seen[1] == {1, 2, 3} and seen[2] == {1, 2, 3, 4}
    assert seen[3] == {1} and seen[4] == {0}  # a count is cut at the length (no frame: nothing)


def test_random_mask_spans_inside_each_sequence():
    x, b, t, f = batch()
    lengths_seen = set()
    for seed in range(40):
        y = dt.audio.random_mask(x, mask_axis=t, broadcast_axis=f, min_num=1, max_num=1, max_dims=5,
                                 generator=torch.Generator().manual_seed(seed))
        m = time_masked(y)
        for i, n in enumerate(LENGTHS):
            r = runs(m[i])
            if n == 0:
                assert r == []
                continue
            (start, end), = r  # one span
            assert 0 <= start < n and start < end <= min(n, start + 5)
            if end < n:
                lengths_seen.add(end - start)
    assert lengths_seen == {1, 2, 3, 4, 5}


def test_random_mask_over_features_and_extra_batch_dims():
    x, b, t, f = batch(feature=12)
    ch = dt.Dim(2, name="ch")
    x2 = dt.Tensor(x.raw[:, :, None].expand(-1, -1, 2, -1).contiguous(), (b, t, ch, f))
    y = dt.audio.random_mask(x2, mask_axis=f, broadcast_axis=t, min_num=2, max_num=2, max_dims=1,
                             generator=torch.Generator().manual_seed(0))
    zero = y.raw == 0  # (b, t, ch, f)
    assert torch.equal(zero.any(1), zero.all(1))  # the same features in every frame (padding included)
    assert (zero.all(1).sum(-1) == 2).all()  # two features per (sequence, channel)
    assert not torch.equal(zero[:, 0, 0], zero[:, 0, 1])  # channels are batch dims: their own masks


def test_mask_at_given_positions():
    x, b, t, f = batch()
    pos = dt.Tensor(torch.tensor([2, 21, 3, 0, 0]), (b,))
    y = dt.audio.mask(x, mask_axis=t, pos=pos, max_amount=1, generator=torch.Generator().manual_seed(0))
    m = time_masked(y)
    assert [runs(m[i]) for i in range(5)] == [[(2, 3)], [(21, 22)], [(3, 4)], [(0, 1)], []]
    for seed in range(10):
        y = dt.audio.mask(x, mask_axis=t, pos=pos, max_amount=4, generator=torch.Generator().manual_seed(seed))
        m = time_masked(y)
        assert runs(m[2]) == [(3, 4)] and len(runs(m[1])) == 1 and runs(m[1])[0][1] <= 23  # cut at the ends
        assert 1 <= int(m[0].sum()) <= 4 and not m[4].any()


def test_specaugment_counts_follow_each_sequences_own_length():
    """Time masks of single frames: a sequence's count is at most min(max(T // 100, 2) * 4, T), T its own length
    (rf's num_masks_per_seq); with num_masks_per_seq=False the longest sequence's T sets it (batch-dependent)."""
    lengths = [1000, 50, 3]
    x, b, t, f = batch(lengths)
    counts = {True: [], False: []}
    for seed in range(30):
        for per_seq in (True, False):
            y = dt.audio.specaugment(x, spatial_dim=t, step=5000, max_consecutive_spatial_dims=1,
                                     max_consecutive_feature_dims=0, num_masks_per_seq=per_seq,
                                     generator=torch.Generator().manual_seed(seed))
            m = time_masked(y)
            assert not any(m[i, n:].any() for i, n in enumerate(lengths))
            counts[per_seq].append(m.sum(-1).tolist())
    for c in counts[True]:
        assert 2 <= c[0] <= 40 and 2 <= c[1] <= 8 and 2 <= c[2] <= 3
    assert max(c[1] for c in counts[False]) > 8  # the range of the longest sequence


def test_specaugment_schedule_training_and_feature_masks():
    x, b, t, f = batch(feature=20)
    g = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    assert dt.audio.specaugment(x, spatial_dim=t, step=5000, training=False) is x
    y = dt.audio.specaugment(x, spatial_dim=t, step=5000, training=False, only_on_train=False, generator=g())
    assert (y.raw == 0).any()
    for step, feature_counts in ((0, range(0, 3)), (1500, range(1, 4)), (5000, range(2, 6))):
        for seed in range(15):
            y = dt.audio.specaugment(x, spatial_dim=t, step=step, max_consecutive_spatial_dims=0,
                                     max_consecutive_feature_dims=1, generator=torch.Generator().manual_seed(seed))
            zero = y.raw == 0
            assert torch.equal(zero.any(1), zero.all(1))
            assert all(c in feature_counts for c in zero.all(1).sum(-1).tolist()), (step, zero.all(1).sum(-1))
    y1 = dt.audio.specaugment(x, spatial_dim=t, global_train_step_dependent=False, generator=g())
    y2 = dt.audio.specaugment(x, spatial_dim=t, global_train_step_dependent=False, generator=g())
    assert torch.equal(y1.raw, y2.raw)  # repeatable with a generator
    y3 = dt.audio.specaugment(x, spatial_dim=t, global_train_step_dependent=False,
                              generator=torch.Generator().manual_seed(2))
    assert not torch.equal(y1.raw, y3.raw)


def test_specaugment_gradient_is_zero_on_masked_frames():
    x, b, t, f = batch()
    raw = torch.randn(x.raw.shape).requires_grad_(True)
    y = dt.audio.specaugment(dt.Tensor(raw, x.dims, feature_dim=f), spatial_dim=t, step=5000,
                             generator=torch.Generator().manual_seed(3))
    y.raw.sum().backward()
    masked = (y.raw == 0) & (raw != 0)
    assert masked.any() and (raw.grad[masked] == 0).all() and (raw.grad[~masked] == 1).all()


def test_errors():
    x, b, t, f = batch()
    with pytest.raises(ValueError, match=r"dimtorch\.audio\.specaugment\(\): dimtorch has no run context: give step="):
        dt.audio.specaugment(x, spatial_dim=t)
    with pytest.raises(ValueError, match=r"dimtorch\.audio\.specaugment\(\): feature_dim must be static"):
        dt.audio.specaugment(x, spatial_dim=f, feature_dim=t, step=0)
    with pytest.raises(TypeError, match=r"dimtorch\.audio\.specaugment\(\): step must be an int"):
        dt.audio.specaugment(x, spatial_dim=t, step=1.5)
    meta_max = dt.Tensor(torch.ones(5, dtype=torch.int64, device="meta"), (b,))
    with pytest.raises(ValueError, match=r"dimtorch\.audio\.random_mask\(\): max_num is a Tensor on meta: give "
                                         r"max_num_bound"):
        dt.audio.random_mask(x, mask_axis=t, broadcast_axis=f, min_num=0, max_num=meta_max, max_dims=2)
    with pytest.raises(TypeError, match=r"dimtorch\.audio\.random_mask\(\): max_dims must be an int >= 1, got 0"):
        dt.audio.random_mask(x, mask_axis=t, broadcast_axis=f, min_num=0, max_num=2, max_dims=0)
    with pytest.raises(ValueError, match=r"dimtorch\.audio\.random_mask\(\): broadcast_axis contains mask_axis"):
        dt.audio.random_mask(x, mask_axis=t, broadcast_axis=[t], min_num=0, max_num=2, max_dims=1)
    with pytest.raises(ValueError, match=r"dimtorch\.audio\.mask\(\): pos must not have mask_axis"):
        dt.audio.mask(x, mask_axis=t, pos=dt.Tensor(torch.zeros(5, 62, dtype=torch.int64), (b, t)), max_amount=1)
    with pytest.raises(TypeError, match=r"dimtorch\.audio\.mask\(\): pos must be an integer Tensor"):
        dt.audio.mask(x, mask_axis=t, pos=dt.Tensor(torch.zeros(5), (b,)), max_amount=1)


def test_specaugment_traced_with_lengths_as_graph_inputs():
    """Under make_fx (symbolic sizes) and torch.compile (fullgraph): no host lengths, the raw time axis bounds
    the mask slots; each output value is x's or 0, time masks only on each sequence's own frames, and new
    time sizes reuse the graph (one recompile to dynamic at most)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    import torch._dynamo.testing

    def fn(raw, lengths):
        b, f = dt.Dim(None, name="batch"), dt.Dim(10, name="feature")
        t = dt.Dim(dt.Tensor(lengths, (b,)), name="time")
        return dt.audio.specaugment(dt.Tensor(raw, (b, t, f)), spatial_dim=t, feature_dim=f, step=5000).raw

    def check(out, raw, lengths):
        assert torch.all((out == raw) | (out == 0))
        zero = out == 0
        time_zero = zero.all(-1)
        for i, n in enumerate(lengths.tolist()):
            assert not time_zero[i, n:].any() or zero[i, n:].all(), "a time mask past the sequence's end"

    raw, lengths = torch.ones(3, 40, 10), torch.tensor([40, 23, 4])
    traced = make_fx(fn, tracing_mode="symbolic")(raw, lengths)
    check(traced(raw, lengths), raw, lengths)
    check(traced(torch.ones(3, 25, 10), torch.tensor([25, 3, 0])), torch.ones(3, 25, 10), torch.tensor([25, 3, 0]))
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    for t_max, lens in ((40, [40, 23, 4]), (31, [31, 2, 9]), (52, [1, 52, 30]), (17, [17, 17, 0])):
        r, n = torch.ones(3, t_max, 10), torch.tensor(lens)
        check(compiled(r, n), r, n)
    assert counter.frame_count <= 2
    with pytest.raises(NotImplementedError, match="num_masks_per_seq=False"):
        make_fx(lambda r, n: dt.audio.specaugment(
            dt.Tensor(r, (b := dt.Dim(None, name="b"), t := dt.Dim(dt.Tensor(n, (b,)), name="t"),
                          f := dt.Dim(10, name="f"))), spatial_dim=t, feature_dim=f, step=5000,
            num_masks_per_seq=False).raw)(raw, lengths)
