"""Errors of torch met inside a dimtorch function composed in Python, named after that function (the
Python side of backend::name_error, which does this for the C++ functions)."""
from __future__ import annotations

import contextlib

_PLAIN = (TypeError, ValueError, RuntimeError, IndexError, OverflowError, NotImplementedError)


@contextlib.contextmanager
def naming_errors(caller: str):
    """Re-raises an error of the block whose message does not start with "dimtorch" as the same
    kind with `caller` in front ("dimtorch.range_over_dim(): Expected one of cpu, cuda, ... device
    type"). For calls whose arguments go to torch unchecked (devices, generators, fill values)."""
    try:
        yield
    except _PLAIN as e:
        if type(e) in _PLAIN and not str(e).startswith("dimtorch"):
            raise type(e)(f"{caller}: {e}") from None
        raise
