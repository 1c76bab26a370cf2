"""rf functions in the forms RETURNN code calls them and dimtorch's own API did not take (the rfns gaps of
issue 21's acceptance run): run on RETURNN frontend and dimtorch.rf (tests/rf_parity.py, skipped without
returnn), and checked against a positional torch computation on batches whose padding holds NaN.

- sparse_to_dense with an int label (RETURNN's raw scalar), as eager beam searches mask ended hypotheses;
- merge_dims keeps the feature marker (out_dim becomes the feature dim when a merged dim was);
- replace_dim(out_dim=Dim(None)): the unknown out_dim takes in_dim's lengths (ops over it mask them);
- range_over_dim(dtype="float32") has no sparse_dim;
- gather with indices over the gathered axis itself (a beam backtrack's range_over_dim(beam), back-pointers
  over the beam they point into): the output keeps the axis, now indexed by the indices."""
import pytest
import torch

import dimtorch as dt
import dimtorch.rf as dtrf
from rf_parity import LENGTHS, Program, make_data, run_both


def _merge_feature(F, d, x):
    y, out = F.merge_dims(x.q4, dims=[d.heads, d.head_dim])
    return y, out


def _gather_over_axis(F, d, x):
    # positions along time computed over (batch, time) itself: each frame reads frame (t + 1) mod length
    pos = F.range_over_dim(d.time)
    lengths = F.copy_to_device(d.time.get_size_tensor())
    nxt = F.combine_bc(pos + 1, "mod", F.maximum(lengths, 1))
    nxt = F.cast(nxt, "int64")
    return F.gather(x.x, indices=nxt, axis=d.time)


def _replace_dim_unknown(F, d, x):
    kv = F.Dim(None, name="kv")
    k, out = F.replace_dim(x.x, in_dim=d.time, out_dim=kv)
    assert out is kv
    return F.reduce_sum(k, axis=kv), kv  # masked by kv's lengths: in_dim's


def _range_float(F, d, x):
    r = F.range_over_dim(d.time, dtype="float32")
    assert r.sparse_dim is None and F.range_over_dim(d.time).sparse_dim is d.time
    return r


def _pack_unknown(F, d, x):
    packed = F.Dim(None, name="packed")
    y, out = F.pack_padded(x.x, dims=[d.batch, d.time], out_dim=packed)
    assert out is packed
    return y, packed


PROGRAMS = [
    Program("pack_padded_into_a_declared_dim", both=_pack_unknown, out=(("*", "feature"),)),
    Program("replace_dim_to_an_unknown_dim", both=_replace_dim_unknown, out=(("batch", "feature"),)),
    Program("range_over_dim_float_has_no_sparse_dim", both=_range_float, out=(("time",),)),
    Program("sparse_to_dense_int_label", out=(("vocab",),),
            both=lambda F, d, x: F.sparse_to_dense(2, axis=d.vocab, label_value=0.0, other_value=-1e30)),
    Program("merge_dims_heads", both=_merge_feature, out=(("batch", "time", "*"),)),
    Program("gather_indices_over_the_axis", both=_gather_over_axis, out=(("batch", "time", "feature"),)),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_program_agrees_with_returnn_frontend(rf, program):
    problems = run_both(program, rf, dtrf)
    assert not problems, "; ".join(problems)


def test_merge_dims_feature_marker_as_returnn_frontend(rf):
    """The feature marker follows a merge of the feature dim (on both), and stays when it is not merged."""
    from returnn.tensor import Dim as RfDim
    for F, dim_type, batch in ((rf, RfDim, RfDim(3, name="batch")), (dtrf, dt.Dim, dt.Dim(None, name="batch"))):
        d, x = make_data(dt if F is dtrf else F, dim_type, batch)
        q = x.q4.copy()
        q.feature_dim = d.head_dim
        merged, out = F.merge_dims(q, dims=[d.heads, d.head_dim])
        assert merged.feature_dim is out
        kept, _ = F.merge_dims(q, dims=[d.batch, d.time])
        assert kept.feature_dim is d.head_dim


def _nan_padded(lengths, feat=3):
    b, t = len(lengths), max(lengths)
    raw = torch.randn(b, t, feat, dtype=torch.float64, requires_grad=False)
    for i, n in enumerate(lengths):
        raw[i, n:] = float("nan")
    return raw


def test_gather_indices_over_the_axis_against_torch():
    """out[b, t, f] = x[b, idx[b, t], f] on valid frames, forward and backward, padding NaN; each sequence
    alone gives its rows of the batch."""
    torch.manual_seed(0)
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor(LENGTHS), (batch,)), name="time")
    feat = dt.Dim(3, name="feat")
    raw = _nan_padded(LENGTHS).requires_grad_()
    idx = torch.stack([torch.randint(0, n, (max(LENGTHS),)) for n in LENGTHS])  # in range, padding included
    x = dt.Tensor(raw, (batch, time, feat), feature_dim=feat)
    out = dtrf.gather(x, indices=dt.Tensor(idx, (batch, time), sparse_dim=time))
    assert out.dims == (batch, time, feat) and out.feature_dim is feat
    want = torch.gather(raw, 1, idx[:, :, None].expand(-1, -1, 3))
    valid = torch.arange(max(LENGTHS))[None, :] < torch.tensor(LENGTHS)[:, None]
    torch.testing.assert_close(out.raw[valid], want[valid])
    assert not out.raw[valid].isnan().any()
    g = torch.randn_like(want)
    (grad,) = torch.autograd.grad((out.raw[valid] * g[valid]).sum(), raw)
    (want_grad,) = torch.autograd.grad((want[valid] * g[valid]).sum(), raw)
    torch.testing.assert_close(grad, want_grad, equal_nan=True)
    for i, n in enumerate(LENGTHS):
        one = dt.Dim(None, name="one")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (one,)), name="t1")
        alone = dtrf.gather(dt.Tensor(raw[i:i + 1, :n].detach(), (one, t1, feat)),
                            indices=dt.Tensor(idx[i:i + 1, :n], (one, t1), sparse_dim=t1))
        torch.testing.assert_close(alone.raw[0], out.raw[i, :n].detach())


def test_gather_beam_backtrack():
    """The backtrack form: gather(target, indices=range_over_dim(beam)) is target itself, and back-pointers
    over (batch, beam) gathered by positions over the same beam dim follow them."""
    batch, beam = dt.Dim(None, name="batch"), dt.Dim(3, name="beam")
    target = dt.Tensor(torch.tensor([[4, 5, 6], [7, 8, 9]]), (batch, beam))
    same = dtrf.gather(target, indices=dtrf.range_over_dim(beam))
    assert same.dims == (batch, beam) and torch.equal(same.raw, target.raw)
    backrefs = dt.Tensor(torch.tensor([[2, 0, 0], [1, 1, 2]]), (batch, beam), sparse_dim=beam)
    pos = dt.Tensor(torch.tensor([[1, 2, 0], [0, 2, 1]]), (batch, beam), sparse_dim=beam)
    got = dtrf.gather(backrefs, indices=pos)
    assert got.dims == (batch, beam) and got.sparse_dim is beam
    assert got.raw.tolist() == torch.gather(backrefs.raw, 1, pos.raw).tolist()


def test_sparse_to_dense_int_label_against_torch():
    vocab = dt.Dim(5, name="vocab")
    out = dtrf.sparse_to_dense(3, axis=vocab, label_value=0.0, other_value=-1e30)
    assert out.dims == (vocab,)
    assert out.raw.tolist() == torch.where(torch.arange(5) == 3, 0.0, -1e30).tolist()
    with pytest.raises(TypeError, match=r"dimtorch\.sparse_to_dense\(\): an int label needs axis"):
        dtrf.sparse_to_dense(3, label_value=1, other_value=0)


def test_backend_scaled_dot_product_attention_against_torch():
    """dimtorch.rf._backend.Backend (RETURNN's test files import it at module level): its attention is
    torch's scaled_dot_product_attention with the padded keys masked (keys' padding NaN), causal too."""
    from dimtorch.rf._backend import Backend
    assert Backend.name == "torch" and Backend.executing_eagerly()
    torch.manual_seed(0)
    batch, feat, vfeat = dt.Dim(None, name="batch"), dt.Dim(4, name="f"), dt.Dim(3, name="v")
    time = dt.Dim(dt.Tensor(torch.tensor(LENGTHS), (batch,)), name="time")
    kv = dt.Dim(dt.Tensor(torch.tensor(LENGTHS), (batch,)), name="kv")
    q = torch.randn(3, max(LENGTHS), 4, dtype=torch.float64)
    k, v = _nan_padded(LENGTHS, 4), _nan_padded(LENGTHS, 3)
    valid = torch.arange(max(LENGTHS))[None, :] < torch.tensor(LENGTHS)[:, None]
    for causal in (False, True):
        out = Backend.scaled_dot_product_attention(
            dt.Tensor(q, (batch, time, feat)), dt.Tensor(k, (batch, kv, feat)), dt.Tensor(v, (batch, kv, vfeat)),
            att_dropout_broadcast=False, v_feat_dim=vfeat, qk_feat_dim=feat, kv_spatial_dim=kv,
            query_spatial_dim=time, is_causal=causal)
        assert out.dims == (batch, time, vfeat)
        mask = valid[:, None, :]
        if causal:
            mask = mask & torch.ones(max(LENGTHS), max(LENGTHS), dtype=torch.bool).tril()
        want = torch.nn.functional.scaled_dot_product_attention(q, k.nan_to_num(), v.nan_to_num(), attn_mask=mask)
        torch.testing.assert_close(out.raw[valid], want[valid])
    with pytest.raises(NotImplementedError, match="RelPosSelfAttention"):
        Backend.rel_pos_self_attention(None, None, None, None)


def test_pack_padded_per_row_into_a_declared_dim():
    """pack_padded(out_dim=Dim(None)) per row (lengths over (batch, hyps)): the declared dim gets the
    packed counts per batch entry as lengths; values are each row's valid frames in order (NaN padding)."""
    batch, hyps = dt.Dim(None, name="batch"), dt.Dim(2, name="hyps")
    lengths = torch.tensor([[2, 3], [0, 1], [3, 3]])
    spatial = dt.Dim(dt.Tensor(lengths, (batch, hyps)), name="spatial")
    raw = torch.arange(3 * 2 * 3, dtype=torch.float32).reshape(3, 2, 3)
    for b in range(3):
        for h in range(2):
            raw[b, h, lengths[b, h]:] = float("nan")
    packed = dt.Dim(None, name="packed")
    y, out = dtrf.pack_padded(dt.Tensor(raw, (batch, hyps, spatial)), dims=[hyps, spatial], out_dim=packed)
    assert out is packed and packed.lengths is not None
    assert packed.lengths.raw.tolist() == lengths.sum(1).tolist()
    for b in range(3):
        want = torch.cat([raw[b, h, :lengths[b, h]] for h in range(2)])
        n = int(lengths[b].sum())
        assert torch.equal(y.raw[b, :n], want)
    packed.dyn_size_ext = None  # unbinds (the dims of this test die with it)


def test_expand_dim_over_the_bound_batch_dim():
    """rf.expand_dim(x, dim=batch_dim) with RETURNN's global batch_dim bound to this batch's size: x repeated
    over it (a view); unbound, an error that names the call."""
    from dimtorch.rf.tensor import Tensor as RfTensor, batch_dim
    feat = dt.Dim(2, name="feat")
    x = dt.Tensor(torch.tensor([1.0, 2.0]), (feat,))
    with pytest.raises(ValueError, match=r"dimtorch\.expand_dim\(\): dim 'batch'.* must be static"):
        dtrf.expand_dim(x, dim=batch_dim)
    batch_dim.dyn_size_ext = RfTensor("batch", [], dtype="int32", raw_tensor=torch.tensor(3, dtype=torch.int32))
    try:
        y = dtrf.expand_dim(x, dim=batch_dim)
        assert y.dims == (batch_dim, feat) and torch.equal(y.raw, x.raw.expand(3, 2))
    finally:
        batch_dim.dyn_size_ext = None


def test_slice_into_a_single_sequence_dim():
    """RETURNN's per-sequence check: one sequence gathered out of the batch, its time replaced by a dim
    whose lengths are that sequence's length (0-dim), then sliced to the length with out_dim= that dim.
    The slice's own dim is static (the end is a host value); a static dim and a dim whose every length
    is that size have the same sizes (the message said 'has sizes 16, but the slice has 16')."""
    b, f = dt.Dim(None, name="b"), dt.Dim(3, name="f")
    time = dt.Dim(dt.Tensor(torch.tensor([4, 2]), (b,)), name="time")
    raw = _nan_padded((4, 2)).float()
    x0 = dtrf.gather(dt.Tensor(raw, (b, time, f)), axis=b, indices=1)
    seq_len = dtrf.gather(time.lengths, axis=b, indices=1)
    one = dt.Dim(seq_len, name="time_b1")
    x0, _ = dtrf.replace_dim(x0, in_dim=time, out_dim=one)
    y, d = dtrf.slice(x0, axis=one, start=0, end=seq_len, out_dim=one)
    assert d is one and y.dims == (one, f) and torch.equal(y.raw, raw[1, :2])
    with pytest.raises(ValueError, match=r"dimtorch\.slice\(\): out_dim 'time_b1'\[\] has sizes 2, but the slice has 1"):
        dtrf.slice(x0, axis=one, start=1, end=seq_len, out_dim=one)


def test_piecewise_linear_agrees_with_returnn_frontend_and_numpy(rf):
    """rf.PiecewiseLinear on both, and numpy.interp (which clamps at the ends as rf does), inputs between,
    on and outside the points; a Tensor value gives a result over its dims too."""
    import numpy
    points = {1: 2.0, 3: 4.0, 5: 1.0}
    xs = torch.tensor([0.0, 1.0, 1.5, 2.0, 3.0, 3.5, 4.0, 5.0, 6.0, -3.0])
    want = torch.tensor(numpy.interp(xs.numpy(), list(points), list(points.values())), dtype=torch.float32)
    n = dt.Dim(len(xs), name="n")
    ours = dtrf.PiecewiseLinear(points)(dt.Tensor(xs, (n,)))
    from returnn.tensor import Dim as RfDim
    rn = RfDim(len(xs), name="n")
    theirs = rf.PiecewiseLinear(points)(rf.convert_to_tensor(xs, dims=[rn]))
    torch.testing.assert_close(ours.raw, want)
    torch.testing.assert_close(ours.raw, theirs.raw_tensor)
    v = dt.Dim(2, name="v")
    vec = dtrf.PiecewiseLinear({0: dt.Tensor(torch.tensor([0.0, 10.0]), (v,)), 2: 1.0})(dt.Tensor(xs, (n,)))
    assert vec.dims == (n, v)
    torch.testing.assert_close(vec.raw[:, 1], torch.tensor(numpy.interp(xs.numpy(), [0, 2], [10.0, 1.0]),
                                                           dtype=torch.float32))


def test_causal_self_attention_full_sequence_after_a_history_with_lengths():
    """CausalSelfAttention over a chunk after a state whose history has lengths per sequence gives, on valid
    frames, what the whole sequence gives at once (each sequence's chunk right after its own history);
    padding NaN in both halves."""
    torch.manual_seed(0)
    batch, feat = dt.Dim(None, name="batch"), dt.Dim(6, name="feat")
    l1, l2 = (3, 1, 0), (2, 4, 3)
    t1 = dt.Dim(dt.Tensor(torch.tensor(l1), (batch,)), name="t1")
    t2 = dt.Dim(dt.Tensor(torch.tensor(l2), (batch,)), name="t2")
    whole = [torch.randn(a + b, 6) for a, b in zip(l1, l2)]
    t = dt.Dim(dt.Tensor(torch.tensor([a + b for a, b in zip(l1, l2)]), (batch,)), name="t")

    def padded(seqs, n):
        raw = torch.full((3, n, 6), float("nan"))
        for i, s in enumerate(seqs):
            raw[i, :len(s)] = s
        return raw

    model = dtrf.CausalSelfAttention(feat, dt.Dim(4, name="proj"), key_dim_total=dt.Dim(4, name="k"),
                                    value_dim_total=dt.Dim(6, name="v"), num_heads=2, att_dropout=0.0)
    x = dt.Tensor(padded(whole, max(a + b for a, b in zip(l1, l2))), (batch, t, feat))
    full, _ = model(x, axis=t)
    x1 = dt.Tensor(padded([w[:a] for w, a in zip(whole, l1)], max(l1)), (batch, t1, feat))
    x2 = dt.Tensor(padded([w[a:] for w, a in zip(whole, l1)], max(l2)), (batch, t2, feat))
    y1, state = model(x1, axis=t1)
    y2, state2 = model(x2, axis=t2, state=state)
    out_dim = full.dims[-1]
    for i, (a, b) in enumerate(zip(l1, l2)):
        want = full.raw_aligned((batch, t, out_dim))[i, :a + b]
        got = torch.cat((y1.raw_aligned((batch, t1, out_dim))[i, :a], y2.raw_aligned((batch, t2, out_dim))[i, :b]))
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert state2.accum_axis.lengths.raw.tolist() == [a + b for a, b in zip(l1, l2)]
