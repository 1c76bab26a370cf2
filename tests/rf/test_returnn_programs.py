"""RETURNN-style forward programs (tests/rf/returnn_programs/) run on RETURNN frontend and, with only their
import lines edited, on dimtorch.rf (tests/rf_programs.py): the marked outputs must agree on valid frames,
dims and lengths included, from the same parameters (RETURNN's, copied by name) and the same batches.
Each program's declared dims are bound to two batches in turn (other sizes and lengths), as an engine
binds them per step. Skipped without `returnn` (pip install .[bench])."""
import pytest

import dimtorch.rf  # noqa: F401  (imported before the tests: its module-level dims are no test's leak)
from rf_programs import both, compare_outputs, make_batch, run_forward, unbind


@pytest.mark.parametrize("name", ["dims_per_batch", "layers"])
def test_forward_program_gives_returnns_outputs(name):
    ref, ref_model, ours, our_model = both(name)
    try:
        for seed, batch in ((1, 3), (2, 4)):  # two batches: the declared dims are bound twice
            raw = make_batch(ref, seed, batch=batch)
            expected = run_forward(ref, ref_model, raw)
            got = run_forward(ours, our_model, raw)
            assert compare_outputs(expected, got) == [], f"batch {seed}"
    finally:
        unbind(ref, ours)


def test_declared_dims_follow_each_batch():
    """After binding, a declared dim has that batch's lengths, and dims made from it follow (RETURNN's
    reset between steps); the program's module-level dims are the same objects throughout."""
    ref, ref_model, ours, our_model = both("dims_per_batch")
    try:
        for seed, batch in ((3, 2), (4, 5)):
            raw = make_batch(ours, seed, batch=batch)
            got = run_forward(ours, our_model, raw)
            lengths = raw["data:size1"].tolist()
            assert ours.time_dim.dyn_size_ext.raw_tensor.tolist() == lengths
            assert ours.batch_dim.get_dim_value() == batch
            assert got["padded"]["dims"][1] == [n + 1 for n in lengths]
    finally:
        unbind(ref, ours)
