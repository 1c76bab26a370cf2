"""The zeros, ones and full fast paths (src/ops/creation.cpp) against their Python definitions
(dimtorch/ops/creation.py), and what the definitions refuse while tracing."""
from __future__ import annotations

import pytest
import torch

import dimtorch as dt
from dimtorch._core.tracing import force_in_graph
from dimtorch.ops import creation

from definition_checks import check, check_error, padded


@pytest.mark.parametrize("dtype", [None, "float64", "int32", torch.bool, "bfloat16"])
def test_static_dims(dtype):
    a, b = dt.Dim(3, name="a"), dt.Dim(2, name="b")
    vocab = dt.Dim(4, name="vocab")
    for dims in [(a, b), [b, a], a, ()]:
        check(dt.zeros, dims, dtype=dtype, backward=False)
        check(dt.ones, dims, dtype=dtype, backward=False)
        check(dt.full, dims, 3, dtype=dtype, backward=False)
    check(dt.full, (a,), 2.5, backward=False)
    check(dt.constant, 2.5, dims=(a,), backward=False)  # full with RETURNN frontend's order
    check(dt.constant, 7, dims=(a, b), dtype=dtype, sparse_dim=vocab, feature_dim=a, backward=False)
    check(dt.full, (a,), True, backward=False)
    check(dt.zeros, (a, b), dtype=dtype, device="cpu", sparse_dim=vocab, feature_dim=b, backward=False)
    check(dt.full, (a, b), 7, dtype=dtype, device=torch.device("cpu"), sparse_dim=vocab, feature_dim=a,
          backward=False)


def test_dynamic_dims_eager_and_in_graph():
    """Eagerly a dynamic dim's size is its longest sequence (a host read, as the fast path makes); the
    in-graph form takes the size bound in the trace, here (no tensor over the dim) the max of its
    lengths read in the graph (dimtorch._core.sizes, rule 4)."""
    x, (batch, time, feature, heads) = padded((4, 2, 0))
    static_batch = dt.Dim(3, name="batch3")
    t = dt.Dim(dt.Tensor(torch.tensor([4, 2, 0]), (static_batch,)), name="t")
    for fn in (dt.zeros, dt.ones):
        check(fn, (static_batch, t, feature), backward=False, in_graph=(False,))
    check(dt.full, (t, static_batch), -1.0, backward=False, in_graph=(False,))
    with force_in_graph():
        assert creation.zeros((static_batch, t)).raw.shape == (3, 4)
        out = creation.zeros((static_batch, feature))
        assert out.raw.shape == (3, 3)


def test_errors_name_the_call():
    a = dt.Dim(3, name="a")
    data = dt.Dim(None, name="data")
    for fn, extra in ((dt.zeros, ()), (dt.ones, ()), (dt.full, (1.0,))):
        for args, kwargs in [((3,), {}), (([a, 3],), {}), (((a, a),), {}), (((a, data),), {}),
                             (((a,),), {"dtype": "nope"}), (((a,),), {"dtype": 3}), (((a,),), {"sparse_dim": 3}),
                             (((a,),), {"feature_dim": data}), (((a,),), {"feature_dim": "a"}),
                             (((a,),), {"device": "nowhere"}), (((a,),), {"foo": 1})]:
            check_error(fn, *args[:1], *extra, *args[1:], **kwargs)
    check_error(dt.full, (a,), "x")
    check_error(dt.full, (a,), 2**70, dtype="int32")
