"""In-graph forms of Dim.get_mask/get_size_tensor, sequence_mask and creation over dims; the op table's rows."""
import pytest
import torch

import dimtorch as dt
from dimtorch import _C
from dimtorch.ops import creation as _creation, mask as _mask
from dimtorch._core import sizes as _sizes, tracing as _tracing
from dimtorch._op_table import OPS
from in_graph_helpers import no_host_reads, padded_env


def test_get_size_tensor_in_graph_is_the_lengths_uncached():
    env = padded_env((5, 3, 0, 2))
    t, f = env["time"], env["feature"]
    with _tracing.force_in_graph(), no_host_reads():
        lengths = _mask.get_size_tensor(t)
        static = _mask.get_size_tensor(f)
    assert lengths.dims == (env["batch"],) and lengths.raw.tolist() == [5, 3, 0, 2]
    assert static.dims == () and int(static.raw) == 3


def test_tensorless_masks_and_creation_take_the_padded_size_of_the_trace():
    """Without a tensor over a dynamic dim in the trace, its padded size is the max of its lengths read in
    the graph (dimtorch._core.sizes, rule 4): here eager's. A size bound first wins (a raw over the dim)."""
    env = padded_env((5, 3, 0, 2))
    b, t = env["batch"], env["time"]
    with _tracing.force_in_graph():
        assert _mask.get_mask(t).raw.shape == (4, 5)
        assert _mask.sequence_mask((b, t)).raw.shape == (4, 5)
        assert _creation.range_over_dim(t).raw.tolist() == [0, 1, 2, 3, 4]
        assert _creation.random_uniform((env["feature"], t)).raw.shape == (3, 5)
    with _tracing.force_in_graph():
        _sizes.bind(t, 7)  # (as Tensor() binds it to its raw's size)
        assert _creation.zeros((b, t)).raw.shape == (4, 7)
    with _tracing.force_in_graph():  # (bound sizes live as long as the trace: here the block)
        assert _creation.zeros((b, t)).raw.shape == (4, 5)
    with _tracing.force_in_graph():
        with no_host_reads():  # static dims need none
            assert _creation.range_over_dim(env["feature"]).raw.tolist() == [0, 1, 2]
            _creation.random_normal((env["feature"],), seed=1)


@pytest.mark.parametrize("order", ["lengths_first", "dim_first"])
def test_get_mask_in_graph_at_a_padded_size(order):
    """Given a padded size (bound in the trace), the in-graph mask is the eager one."""
    env = padded_env((5, 3, 0, 2))
    b, t = env["batch"], env["time"]
    dims = (b, t) if order == "lengths_first" else (t, b)
    eager = t.get_mask(dims_order=dims)
    with _tracing.force_in_graph(), no_host_reads():
        _sizes.bind(t, 5)
        graph = _mask.get_mask(t, dims_order=dims)
        seq = _mask.sequence_mask(dims)
    assert graph.dims == eager.dims == seq.dims
    assert torch.equal(graph.raw, eager.raw) and torch.equal(seq.raw, eager.raw)


def test_op_table_holds_every_public_op_with_its_definition():
    public = [n for n in dt.__all__ if callable(getattr(dt, n)) and not isinstance(getattr(dt, n), type)]
    missing = [n for n in public if not hasattr(_C, n) and n not in OPS]
    assert not missing, f"public Python ops without a row in _op_table: {missing}"
    for name, op in OPS.items():
        assert getattr(dt, name) is (op.fast_path if op.fast_path is not None else op.definition), name
        assert op.definition.__name__ == name
