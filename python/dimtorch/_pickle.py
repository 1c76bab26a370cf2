"""Pickling of Dim and Tensor: a pickled Dim is rebuilt as a new Dim with the same size, lengths or
derivation. Identity is per process, so the Dims of one pickled object graph (a module and its
dims, say) come back as one consistent set of new Dims, shared as they were shared before.

The rebuilding callables are registered with torch as safe globals, so that
torch.load(weights_only=True) (torch's default, which runs no code from the file) loads states that
hold Dims and Tensors. They only make Dims and Tensors from plain data, and check their arguments."""
from __future__ import annotations

import torch

from ._C import Dim, Tensor, ceildiv

_DIM_MATH = {"add": Dim.__add__, "sub": Dim.__sub__, "mul": Dim.__mul__, "floordiv": Dim.__floordiv__,
             "ceildiv": ceildiv}


def reduce_dim(dim: Dim):
    """(callable, args) for Dim.__reduce__."""
    derivation = dim.derivation
    if derivation is not None:
        op, a, b, k = derivation
        return rebuild_derived_dim, (op, a, b, k)
    return Dim, (dim.dyn_size if dim.dyn_size is not None else dim.size, dim.name)


def rebuild_derived_dim(op: str, a: Dim, b, k: int) -> Dim:
    """The dim math that made a dim (so that e.g. time + 1 stays time + 1 of the rebuilt time)."""
    if not isinstance(a, Dim) or not (b is None or isinstance(b, Dim)) or type(k) is not int:
        raise TypeError(f"dimtorch: cannot unpickle a derived dim from ({type(a).__name__}, "
                        f"{type(b).__name__}, {type(k).__name__})")
    if op == "concat" and b is not None:
        return a + b
    if op in _DIM_MATH and b is None:
        return _DIM_MATH[op](a, k)
    raise ValueError(f"dimtorch: cannot unpickle a dim made by {op!r}")


def reduce_tensor(t: Tensor):
    """(callable, args) for Tensor.__reduce__."""
    return rebuild_tensor, (t.raw, t.dims, t.sparse_dim, t.feature_dim, t.name)


def rebuild_tensor(raw, dims, sparse_dim, feature_dim, name) -> Tensor:
    return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim, name=name)


def register_safe_globals() -> None:
    """Lets torch.load(weights_only=True) rebuild Dims and Tensors (called when dimtorch is imported)."""
    torch.serialization.add_safe_globals([Dim, Tensor, rebuild_tensor, rebuild_derived_dim])
