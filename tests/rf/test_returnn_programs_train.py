"""RETURNN-style train programs (tests/rf/returnn_programs/) run on RETURNN frontend and, with only their
import lines edited, on dimtorch.rf (tests/rf_programs.py): every marked loss's summed, mean and
inv_norm_factor values, the total loss (RETURNN's torch engine semantics: scale, use_normalized_loss,
custom_inv_norm_factor, as_error) and every parameter's gradient must agree, from the same parameters
and batches. The attention decoder is a small model in the style of RETURNN's demo-rf-pt-benchmark.py.
Skipped without `returnn` (pip install .[bench])."""
import pytest

import dimtorch.rf  # noqa: F401  (imported before the tests: its module-level dims are no test's leak)
from rf_programs import both, compare_train, make_batch, run_train, unbind


@pytest.mark.parametrize("name", ["losses", "att_decoder"])
def test_train_program_gives_returnns_losses_and_gradients(name):
    ref, ref_model, ours, our_model = both(name)
    try:
        for seed, batch in ((1, 3), (2, 4)):
            raw = make_batch(ref, seed, batch=batch)
            expected = run_train(ref, ref_model, raw, train_flag=False)
            got = run_train(ours, our_model, raw, train_flag=False)
            assert compare_train(expected, got) == [], f"batch {seed}"
    finally:
        unbind(ref, ours)
