"""The loops' per-step walk of a state (ops/loop.py _zip_map: tuples, lists, dicts, rf.State without pytree)
gives what the pytree walk gives: the same masked leaves in the same structure, and the same errors."""
import collections

import pytest
import torch
import torch.utils._pytree as pytree

import dimtorch as dt
from dimtorch.ops import loop as _loop
from dimtorch.rf.state import State
from dimtorch.rf import LstmState

Pair = collections.namedtuple("Pair", "a b")


def _dims():
    batch = dt.Dim(3, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([2, 1, 3]), (batch,)), name="time")
    feat = dt.Dim(4, name="feat")
    return batch, time, feat


def _pytree_masked(new, old, mask):
    """The reference: leaves by pytree, masked by _mask_leaf, unflattened."""
    new_leaves, spec = pytree.tree_flatten(new, is_leaf=_loop._is_leaf)
    old_leaves, old_spec = pytree.tree_flatten(old, is_leaf=_loop._is_leaf)
    assert spec == old_spec
    return pytree.tree_unflatten([_loop._mask_leaf(n, o, mask, "test") for n, o in zip(new_leaves, old_leaves)], spec)


def _states(batch, feat):
    def t(fill):
        return dt.Tensor(torch.full((3, 4), float(fill)), (batch, feat))
    return [
        lambda f: (t(f), [t(f + 1), None, 2], {"x": t(f + 2), "y": "name"}),
        lambda f: State(decoder=State(s=LstmState(h=t(f), c=t(f + 1)), att=t(f + 2)), step=7),
        lambda f: {"p": Pair(t(f), t(f + 1)), "q": (feat, 1.5)},  # a named tuple: pytree's walk
        lambda f: State(b=t(f), a=t(f + 1)),  # keys out of order: sorted, as State's pytree node lists them
    ]


@pytest.mark.parametrize("case", range(4))
def test_masked_state_walk_as_pytree(case):
    batch, _, feat = _dims()
    make = _states(batch, feat)[case]
    new, old = make(10), make(0)
    mask = dt.Tensor(torch.tensor([True, False, True]), (batch,))
    got = _loop._masked_state(new, old, mask, "test")
    want = _pytree_masked(new, old, mask)
    got_leaves, got_spec = pytree.tree_flatten(got, is_leaf=_loop._is_leaf)
    want_leaves, want_spec = pytree.tree_flatten(want, is_leaf=_loop._is_leaf)
    assert got_spec == want_spec and type(got) is type(want)
    for g, w in zip(got_leaves, want_leaves):
        if isinstance(w, dt.Tensor):
            assert g.dims == w.dims and torch.equal(g.raw, w.raw)
        else:
            assert g == w
    assert _loop._keeps_layout(new, old)


def test_state_walk_differences_raise_as_pytree():
    batch, _, feat = _dims()
    x = dt.Tensor(torch.zeros(3, 4), (batch, feat))
    mask = dt.Tensor(torch.tensor([True, False, True]), (batch,))
    for new, old in [({"a": x, "b": x}, {"b": x, "a": x}),  # a dict's key order is its structure (pytree's)
                     ((x, x), (x,)), ([x], (x,)), (State(a=x), State(b=x))]:
        with pytest.raises(ValueError, match="another structure"):
            _loop._masked_state(new, old, mask, "test")
        assert not _loop._keeps_layout(new, old)
    # None is a leaf (pytree's too): a None new leaf is taken as it is, and is not the old leaf's layout
    assert _loop._masked_state((x, None), (x, x), mask, "test")[1] is None
    assert not _loop._keeps_layout((x, None), (x, x))
    # a leaf of another layout: not kept as it is
    y = dt.Tensor(torch.zeros(4, 3), (feat, batch))
    assert not _loop._keeps_layout(State(a=y), State(a=x))
    assert _loop._device_of(State(a=State(b=x)), None) == x.raw.device
    assert _loop._device_of({"p": Pair(1, x)}) == x.raw.device  # via pytree


def test_scan_nested_state_masked_per_sequence():
    batch, time, feat = _dims()
    xs = dt.Tensor(torch.arange(9.0).reshape(3, 3, 1).expand(3, 3, 4).clone(), (batch, time, feat))

    def body(x, s):
        acc = s.decoder.acc + x
        return {"y": acc}, State(decoder=State(acc=acc, n=s.decoder.n + 1.0))

    init = State(decoder=State(acc=dt.Tensor(torch.zeros(3, 4), (batch, feat)),
                               n=dt.Tensor(torch.zeros(3), (batch,))))
    ys = {"y": dt.Tensor(torch.zeros(3, 4), (batch, feat))}
    _, final, _ = dt.rf.scan(spatial_dim=time, xs=xs, ys=ys, initial=init, body=body)
    assert type(final) is State and type(final.decoder) is State
    assert final.decoder.n.raw.tolist() == [2.0, 1.0, 3.0]  # each sequence stops at its length
    sums = [float(xs.raw[b, :n, 0].sum()) for b, n in enumerate([2, 1, 3])]
    assert final.decoder.acc.raw[:, 0].tolist() == sums
