"""The ground floor of the Python ops: argument checks and the dim/dims strings of error messages.

Every op module imports these; this module imports only dimtorch._C, so that it sits below all of
them (an op module importing another op module for a helper would tie the two together).
"""
from __future__ import annotations

from ._C import Dim, Tensor


def dim_str(dim: Dim) -> str:
    """`'name'(size)` or `'name'[batch]`: a dim as error messages show it."""
    r = repr(dim)
    return r[4:-1] if r.startswith("Dim{") and r.endswith("}") else r


def dims_str(dims) -> str:
    """Dims of a tensor as error messages show them: `'batch'(?), 'time'[batch], 'f'(4)`."""
    return ", ".join(dim_str(d) for d in dims) or "(none)"


def check_tensor(x, caller: str, what: str = "x") -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{caller}: {what} must be a dimtorch.Tensor, got {type(x).__name__}")


def dims_arg(value, caller: str, what: str) -> tuple:
    """A Dim or a sequence of Dims as a tuple; a TypeError naming the call for anything else."""
    if isinstance(value, Dim):
        return (value,)
    try:
        dims = tuple(value)
    except TypeError:
        raise TypeError(f"{caller}: {what} must be a Dim or a sequence of Dims, got {type(value).__name__}") from None
    for i, d in enumerate(dims):
        if not isinstance(d, Dim):
            raise TypeError(f"{caller}: {what}[{i}] must be a Dim, got {type(d).__name__}")
    return dims


def axis_of(x: Tensor, dim, caller: str, what: str = "axis", of: str = "x") -> int:
    """Raw axis of `dim` in `x`, or a clear error naming x's dims."""
    if not isinstance(dim, Dim):
        raise TypeError(f"{caller}: {what} must be a Dim, got {type(dim).__name__}")
    dims = x.dims
    if dim in dims:  # Dim equality is identity
        return dims.index(dim)
    raise ValueError(f"{caller}: {what} {dim_str(dim)} is not a dim of {of} (dims: {dims_str(x.dims)})")


def keep_markers(x: Tensor, raw, dims: tuple) -> Tensor:
    """Tensor over `dims` keeping x's sparse_dim, and its feature_dim where that is still in `dims`."""
    feature_dim = x.feature_dim
    if feature_dim is not None and feature_dim not in dims:  # Dim equality is identity
        feature_dim = None
    return Tensor(raw, dims, sparse_dim=x.sparse_dim, feature_dim=feature_dim)
