"""dimtorch.rf's loops with rf's signatures, the same programs run on RETURNN frontend: rf.scan over a dim with
lengths (states kept after each sequence's end), scan with cond and no spatial_dim (new lengths), scan whose
outputs change dims per step (return_tensor_arrays=True), while_loop, cond with Parameter.assign_add;
TensorArray (push_back, [i], stack onto a dim with lengths, unstack); rf.State as a pytree (LstmState)."""
import pytest
import torch
import torch.utils._pytree as pytree

import dimtorch as dt
import dimtorch.rf as drf
from rf_module_sides import Data, their_raw


def test_scan_over_spatial_dim(rf):
    """A running sum over time: beyond each sequence's end the state stays (the final state is the sum over
    its valid frames); outputs there are padding."""
    data = Data(rf, feature=4, pad=float("nan"))
    ys, final, dim = drf.scan(spatial_dim=data.time, xs=data.x, ys=dt.Tensor(torch.zeros(3, 4), (data.batch, data.feat)),
                              initial=dt.zeros((data.feat,)) + dt.Tensor(torch.zeros(3, 4), (data.batch, data.feat)),
                              body=lambda x, s: (s + x, s + x))
    rys, rfinal, _ = rf.scan(spatial_dim=data.rtime, xs=data.rx, ys=rf.Tensor("y", dims=[data.rbatch, data.rfeat],
                                                                                dtype="float32"),
                             initial=rf.zeros([data.rbatch, data.rfeat]), body=lambda x, s: (s + x, s + x))
    assert dim is data.time
    d = ys.raw_aligned((data.batch, data.time, data.feat)).detach()
    r = their_raw(rys, [data.rbatch, data.rtime, data.rfeat]).detach()
    for b, n in enumerate(data.lengths):
        torch.testing.assert_close(d[b, :n], r[b, :n])
    torch.testing.assert_close(final.raw_aligned((data.batch, data.feat)).detach(),
                               their_raw(rfinal, [data.rbatch, data.rfeat]).detach())
    assert torch.isfinite(final.raw).all()  # the NaN padding never reached the state


def test_scan_with_cond_makes_lengths(rf):
    """No spatial_dim: loop while cond holds for some entry; each entry's step count is the new dim's lengths."""
    from returnn.tensor import Dim as RfDim
    limits = torch.tensor([3, 1, 4])
    batch = dt.Dim(None, name="batch")
    rbatch = RfDim(3, name="batch")
    lim, rlim = dt.Tensor(limits, (batch,)), rf.convert_to_tensor(limits, dims=[rbatch])

    def body(_, s):
        i, acc = s
        return acc * 2.0, (i + 1, acc + 1.0)

    ys, (i, acc), new_dim = drf.scan(cond=lambda _, s: s[0] < lim, cond_dims=[batch], body=body,
                                     initial=(lim * 0, dt.cast(lim, "float32") * 0.0),
                                     ys=dt.Tensor(torch.zeros(3), (batch,)))
    rys, (ri, racc), rnew = rf.scan(cond=lambda _, s: s[0] < rlim, cond_dims=[rbatch], body=body,
                                    initial=(rf.zeros([rbatch], dtype="int64"), rf.zeros([rbatch])),
                                    ys=rf.Tensor("y", dims=[rbatch], dtype="float32"))
    assert new_dim.lengths.raw.tolist() == rnew.dyn_size_ext.raw_tensor.tolist() == [3, 1, 4]
    torch.testing.assert_close(acc.raw_aligned((batch,)), their_raw(racc, [rbatch]))
    d, r = ys.raw_aligned((new_dim, batch)), their_raw(rys, [rnew, rbatch])
    for b, n in enumerate([3, 1, 4]):
        torch.testing.assert_close(d[:n, b], r[:n, b])


def test_scan_outputs_changing_dims(rf):
    """A beam dim that changes every step (RETURNN's test_scan_changing_dim program): with
    return_tensor_arrays=True the outputs come as a TensorArray, y[-1] the last step's."""
    data = Data(rf, feature=4, pad=0.0)

    def make_body(F, range_over_dim, dim_cls, mul):
        def body(x, s):
            y = s["state"] + x
            beam = dim_cls(3, name="beam")
            y = F.reduce_mean(mul(y, range_over_dim(beam)), axis=s["beam_dim"])
            return y, {"state": y, "beam_dim": beam}
        return body

    beam0 = dt.Dim(1, name="initial-beam")
    ys, last, _ = drf.scan(spatial_dim=data.time, xs=data.x,
                           body=make_body(dt, lambda d: dt.cast(dt.range_over_dim(d), "float32"), dt.Dim,
                                          lambda a, b: dt.combine(a, b, "mul", allow_broadcast_all_sources=True)),
                           initial={"state": dt.Tensor(torch.zeros(3, 1, 4), (data.batch, beam0, data.feat)),
                                    "beam_dim": beam0},
                           ys=dt.Tensor(torch.zeros(3, 1, 4), (data.batch, beam0, data.feat)), return_tensor_arrays=True)
    assert isinstance(ys, drf.TensorArray) and len(ys) == max(data.lengths)
    assert ys[-1].dims == (data.batch, last["beam_dim"], data.feat) or set(ys[-1].dims) == {data.batch,
                                                                                           last["beam_dim"], data.feat}
    from returnn.tensor import Dim as RfDim
    rbeam0 = RfDim(1, name="initial-beam")

    def rrange(d):
        r = rf.range_over_dim(d, dtype="float32")
        r.sparse_dim = None
        return r
    rys, rlast, _ = rf.scan(spatial_dim=data.rtime, xs=data.rx,
                            body=make_body(rf, rrange, RfDim, lambda a, b: rf.combine_bc(a, "mul", b)),
                            initial={"state": rf.zeros((data.rbatch, rbeam0, data.rfeat)), "beam_dim": rbeam0},
                            ys=rf.Tensor("y", dims=(data.rbatch, rbeam0, data.rfeat), dtype="float32"),
                            return_tensor_arrays=True)
    # (the last step of shorter sequences is padding: compared for the longest sequence)
    torch.testing.assert_close(ys[-1].raw_aligned((data.batch, last["beam_dim"], data.feat))[0],
                               their_raw(rys[-1], [data.rbatch, rlast["beam_dim"], data.rfeat])[0])


def test_while_loop_and_cond_param_assign():
    drf.init_forward_step_run_ctx()

    class Net(drf.Module):
        def __init__(self):
            super().__init__()
            self.param = drf.Parameter(dims=(), dtype="int32")
            self.param.initial = 2

        def __call__(self, flag):
            drf.cond(pred=flag, true_fn=lambda: self.param.assign_add(3), false_fn=lambda: self.param.assign_add(7))
            return self.param

    net = Net()
    assert isinstance(net.param, drf.Parameter) and not net.param.raw.requires_grad  # int: not trainable
    a = drf.copy(net.param) if hasattr(drf, "copy") else dt.Tensor(net.param.raw.clone(), ())
    assert int(net(dt.Tensor(torch.tensor(True), ())).raw) == 5
    assert int(net(False).raw) == 12
    assert int(a.raw) == 2  # a copy taken before is unchanged
    net.param.assign(dt.Tensor(torch.tensor(1, dtype=torch.int32), ()))
    assert int(net.param.raw) == 1
    i = drf.while_loop(cond=lambda s: s < 10, body=lambda s: s * 2, initial=dt.Tensor(torch.tensor(1), ()))
    assert int(i.raw) == 16
    s = drf.while_loop(cond=lambda s: s[0] < 3, body=lambda s: (s[0] + 1, s[1] * 2.0),
                       initial=(dt.Tensor(torch.tensor(0), ()), dt.Tensor(torch.tensor(1.0), ())))
    assert float(s[1].raw) == 8.0


def test_tensor_array():
    batch, feat = dt.Dim(None, name="batch"), dt.Dim(2, name="feat")
    ta = drf.TensorArray(dt.Tensor(torch.zeros(3, 2), (batch, feat)))
    for t in range(4):
        ta = ta.push_back(dt.Tensor(torch.full((3, 2), float(t)), (batch, feat)))
    assert len(ta) == 4 and float(ta[-1].raw[0, 0]) == 3.0 and float(ta[dt.Tensor(torch.tensor(1), ())].raw[0, 0]) == 1.0
    stacked = ta.stack(axis=dt.Dim(4, name="steps"))
    assert stacked.raw.shape == (4, 3, 2)
    # onto a dim with lengths (e.g. each hypothesis' length after a search): padding beyond each length
    out = dt.Dim(dt.Tensor(torch.tensor([4, 2, 3]), (batch,)), name="out-spatial")
    hyps = ta.stack(axis=out)
    assert hyps.dims[0] is out and hyps.raw.shape == (4, 3, 2)
    with pytest.raises(ValueError, match="has size 3"):
        ta.stack(axis=dt.Dim(3, name="three"))
    back = drf.TensorArray.unstack(stacked, axis=stacked.dims[0])
    assert len(back) == 4 and torch.equal(back[2].raw, ta[2].raw)


def test_state_is_a_pytree():
    h, c = dt.Tensor(torch.zeros(2), (dt.Dim(2, name="a"),)), dt.Tensor(torch.ones(2), (dt.Dim(2, name="b"),))
    s = drf.LstmState(h=h, c=c)
    leaves, spec = pytree.tree_flatten(s, is_leaf=lambda v: isinstance(v, dt.Tensor))
    assert len(leaves) == 2 and leaves[0] is c and leaves[1] is h  # sorted keys (dm-tree's order)
    s2 = pytree.tree_unflatten([h, c], spec)
    assert type(s2) is drf.LstmState and s2.h is c and s2.c is h
    st = drf.State(a=1, b=drf.State(x=s))
    assert st.b.x.h is h
    st.c = 3
    assert st["c"] == 3 and type(pytree.tree_map(lambda v: v, st)) is drf.State
    with pytest.raises(AttributeError):
        st.missing


def test_state_filled_in_another_order():
    """A body may fill its new state in another key order than the initial one (the demo does): rf compares loop
    structures by sorted keys (dm-tree), so must dimtorch.rf's loops (rf.State and plain dicts)."""
    batch, feat = dt.Dim(None, name="batch"), dt.Dim(2, name="feat")
    time = dt.Dim(dt.Tensor(torch.tensor([3, 1]), (batch,)), name="time")
    x = dt.Tensor(torch.ones(2, 3, 2), (batch, time, feat))
    zero = dt.Tensor(torch.zeros(2, 2), (batch, feat))

    def body(x_, s):
        new = drf.State()
        new.b = s.b + x_
        new.a = s.a + 2.0 * x_
        plain = {"q": s.inner["q"] + 1.0, "p": s.inner["p"]}
        new.inner = plain
        return x_, new

    _, final, _ = drf.scan(spatial_dim=time, xs=x, body=body, ys=zero,
                           initial=drf.State(a=zero, b=zero, inner={"p": zero, "q": zero}))
    assert final.a.raw_aligned((batch, feat)).tolist() == [[6.0, 6.0], [2.0, 2.0]]
    assert final.inner["q"].raw_aligned((batch, feat)).tolist() == [[3.0, 3.0], [1.0, 1.0]]
    out = drf.while_loop(lambda s: s["i"] < 3, lambda s: {"v": s["v"] + 1.0, "i": s["i"] + 1},
                         {"i": dt.Tensor(torch.tensor(0), ()), "v": dt.Tensor(torch.tensor(0.0), ())})
    assert float(out["v"].raw) == 3.0


def test_tensor_array_stack_takes_the_templates_markers():
    batch, feat = dt.Dim(None, name="batch"), dt.Dim(2, name="feat")
    ta = drf.TensorArray(dt.Tensor(torch.zeros(3, 2), (batch, feat), feature_dim=feat))
    ta = ta.push_back(dt.Tensor(torch.ones(3, 2), (batch, feat)))  # (an op that dropped the marker)
    assert ta.stack(axis=dt.Dim(1, name="one")).feature_dim is feat
