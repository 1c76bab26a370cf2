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


_UNEXPECTED = "got an unexpected keyword argument '"


def torch_keyword_hint(text: str, fn=None) -> str:
    """For Python's "f() got an unexpected keyword argument 'dim'" (or 'keepdim'), what to use
    instead, as src/core/keyword_hints.h says it; fn's own keywords name the one that plays torch's
    part. "" for any other message. Error paths only."""
    at = text.find(_UNEXPECTED)
    if at < 0:
        return ""
    key = text[at + len(_UNEXPECTED):].split("'", 1)[0]
    if key == "keepdim":
        return (" (dimtorch has no keepdim: the result keeps its other dims, and ops align operands by "
                "dim, so it broadcasts against the input as it is)")
    if key != "dim":
        return ""
    names = ()
    if fn is not None:
        import inspect
        try:
            names = tuple(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            pass
    for want in ("axis", "axes", "reduce", "in_spatial_dim", "in_spatial_dims", "spatial_dim", "in_dim", "dims"):
        if want in names:
            return f" (dimtorch names an axis by its Dim, not a number: use {want}=)"
    return (" (dimtorch names an axis by its Dim, not a number: pass it by the call's own Dim "
            "keyword, see its help())")
