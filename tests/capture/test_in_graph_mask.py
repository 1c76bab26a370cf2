"""In-graph forms of Dim.get_mask/get_size_tensor, sequence_mask and creation over dims; the op table's rows."""
import pytest
import torch

import dimtorch as dt
from dimtorch import _C
from dimtorch.ops import creation as _creation, mask as _mask
from dimtorch._core import in_graph as _in_graph, tracing as _tracing
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


def test_tensorless_masks_and_creation_need_a_padded_size_in_graph():
    env = padded_env((5, 3, 0, 2))
    t = env["time"]
    with _tracing.force_in_graph():
        for call in (lambda: _mask.get_mask(t), lambda: _mask.sequence_mask((env["batch"], t)),
                     lambda: _creation.range_over_dim(t), lambda: _creation.random_uniform((env["feature"], t))):
            with pytest.raises(ValueError, match="while tracing, dim 'time'.* has lengths and no tensor"):
                call()
        with no_host_reads():  # static dims need none
            assert _creation.range_over_dim(env["feature"]).raw.tolist() == [0, 1, 2]
            _creation.random_normal((env["feature"],), seed=1)


@pytest.mark.parametrize("order", ["lengths_first", "dim_first"])
def test_get_mask_in_graph_at_a_padded_size(monkeypatch, order):
    """Given a padded size (the hook _in_graph.padded_size), the in-graph mask is the eager one."""
    env = padded_env((5, 3, 0, 2))
    b, t = env["batch"], env["time"]
    dims = (b, t) if order == "lengths_first" else (t, b)
    eager = t.get_mask(dims_order=dims)
    monkeypatch.setattr(_in_graph, "padded_size", lambda d, caller: 5)
    with _tracing.force_in_graph(), no_host_reads():
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
