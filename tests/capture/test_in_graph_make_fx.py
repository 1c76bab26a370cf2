"""Under make_fx the ops select their in-graph forms by themselves (tracing() is true there) and read no data.

make_fx with fake tensors raises on any read of tensor values (.item(), bool(), a copy to the host):
tracing the ops' Python definitions through it checks that the forms tracing() selects read
none. The lengths here are host constants of the graph; making them graph inputs is the Dim's own
in-graph definition (not these ops').
"""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import dimtorch as dt
from dimtorch._core import tracing as _tracing
from dimtorch.ops.concat import concat
from dimtorch.ops.conv import conv
from dimtorch.ops.loss import cross_entropy, ctc_loss
from dimtorch.ops.pad import pad
from dimtorch.ops.pool import pool
from dimtorch.ops.slicing import reverse_sequence, shift_left
from dimtorch.ops.slicing import slice as dslice
from dimtorch.ops.sort import cumsum, sort, top_k
from dimtorch.ops.stack import split
from in_graph_helpers import padded_env


def _ops(env):
    b, t, f = env["batch"], env["time"], env["feature"]
    out, k = dt.Dim(4, name="out"), dt.Dim(3, name="k")
    w = dt.Tensor(torch.randn(4, 3, 3), (out, f, k))
    lt = dt.Dim(dt.Tensor(torch.tensor([2, 1, 0, 1]), (b,)), name="labels_time")
    labels = dt.Tensor(torch.randint(0, 2, (4, 2)), (b, lt))
    a = dt.Dim(dt.Tensor(torch.tensor([2, 1, 0, 2]), (b,)), name="a")
    rest = dt.Dim(dt.Tensor(torch.tensor([3, 2, 0, 0]), (b,)), name="rest")
    tgt = dt.Tensor(torch.randint(0, 3, (4, 7)), (b, t), sparse_dim=f)
    # The C++ Dim derives a dim's host lengths when first asked (here, eagerly: the Dim's own in-graph
    # definition is not what this test checks).
    (t + t).get_max_size()
    return {
        "pad": lambda x: pad(x, axes=t, padding=(1, 2))[0],
        "pad_reflect": lambda x: pad(x, axes=t, padding=(1, 1), mode="reflect")[0],
        "concat": lambda x: concat((x, t), (x, t))[0],
        "slice": lambda x: dslice(x, axis=t, start=1, end=-1)[0],
        "shift_left": lambda x: shift_left(x, axis=t, amount=2),
        "reverse_sequence": lambda x: reverse_sequence(x, axis=t),
        "split": lambda x: split(x, axis=t, out_dims=(a, rest))[1],
        "cumsum": lambda x: cumsum(x, axis=t),
        "sort": lambda x: sort(x, axis=t)[0],
        "top_k": lambda x: top_k(x, axis=t, k=dt.Dim(2, name="k2"))[0],
        "conv": lambda x: conv(x, w, in_dim=f, out_dim=out, in_spatial_dims=(t,), filter_size=(k,), padding="same")[0],
        "pool": lambda x: pool(x, mode="avg", pool_size=2, padding="same", in_spatial_dims=t)[0],
        "cross_entropy": lambda x: cross_entropy(estimated=x, target=tgt, axis=f),
        "ctc_loss": lambda x: ctc_loss(logits=x, targets=labels, input_spatial_dim=t, targets_spatial_dim=lt,
                                       blank_index=2),
    }


@pytest.mark.parametrize("name", ["pad", "pad_reflect", "concat", "slice", "shift_left", "reverse_sequence", "split",
                                  "cumsum", "sort", "top_k", "conv", "pool", "cross_entropy", "ctc_loss"])
def test_op_traces_with_fake_tensors(name):
    env = padded_env((5, 3, 0, 2), extra_time=2, pad=0.0)
    op = _ops(env)[name]
    dims = env["x"].dims

    def fn(raw):
        return op(dt.Tensor(raw, dims)).raw

    graph = make_fx(fn, tracing_mode="fake", _allow_non_fake_inputs=True)(env["x"].raw)
    with _tracing.force_in_graph():
        want = fn(env["x"].raw)
    torch.testing.assert_close(graph(env["x"].raw), want, equal_nan=True)
