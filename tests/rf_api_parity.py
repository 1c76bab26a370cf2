"""One program on RETURNN's returnn.tensor and on dimtorch.rf.tensor: the tests of RETURNN's Tensor and Dim API
(tests/rf/test_tensor_api.py, test_dim_api.py, test_dims_per_batch.py) compare what both give.

A program is a function of `T`, the tensor module (Tensor, Dim, TensorDict, batch_dim, single_step_dim),
that returns plain values (ints, lists, names: `name(d, T)`, which calls the global batch dim "B" on both
sides, as RETURNN and dimtorch name it differently). RETURNN runs with its PyTorch backend at its newest
behavior version (tests/rf_parity.py); where `returnn` is not installed the comparison is skipped.
"""
from __future__ import annotations

import contextlib
import sys

import pytest

import dimtorch.rf.tensor as dt_tensor
from rf_parity import setup_rf


def returnn_tensor():
    """returnn.tensor (RETURNN set up for PyTorch), or a skip saying why it is not there."""
    rf, problem = setup_rf()
    if rf is None:
        pytest.skip(f"returnn not usable here: {problem}")
    import returnn.tensor as rt
    return rt


def name(d, T) -> str:
    """A dim's name, "B" for the global batch dim."""
    return "B" if d is T.batch_dim else d.name


def names(dims, T) -> list:
    return [name(d, T) for d in dims]


@contextlib.contextmanager
def _unbound_batch(T):
    try:
        yield
    finally:
        T.batch_dim.reset_eager()
        if T is not dt_tensor:
            T.batch_dim.dyn_size_ext = None


def run_both(program):
    """(RETURNN's result, dimtorch's result) of program(T); the global batch dim is unbound after each."""
    rt = returnn_tensor()
    out = []
    for T in (rt, dt_tensor):
        with _unbound_batch(T), contextlib.redirect_stdout(sys.stderr):
            out.append(program(T))
    return tuple(out)
