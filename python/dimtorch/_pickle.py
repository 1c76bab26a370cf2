"""Pickling of Dim and Tensor: a pickled Dim is rebuilt as a new Dim with the same size, lengths or
derivation. Identity is per process, so the Dims of one pickled object graph (a module and its
dims, say) come back as one consistent set of new Dims, shared as they were shared before.

The rebuilding callables are registered with torch as safe globals, so that
torch.load(weights_only=True) (torch's default, which runs no code from the file) loads states that
hold Dims and Tensors. They only make Dims and Tensors from plain data, and check their arguments."""
from __future__ import annotations

import torch

from ._C import Dim, Tensor, ceildiv
from ._core import global_dims as _global_dims

_GLOBAL_DIMS = ("batch_dim", "single_step_dim")

_DIM_MATH = {"add": Dim.__add__, "sub": Dim.__sub__, "mul": Dim.__mul__, "floordiv": Dim.__floordiv__,
             "ceildiv": ceildiv}


def reduce_dim(dim: Dim):
    """(callable, args) for Dim.__reduce__."""
    for name in _GLOBAL_DIMS:
        if dim is getattr(_global_dims, name):
            return global_dim, (name,)
    derivation = dim.derivation
    if derivation is not None:
        op, a, b, k = derivation
        return rebuild_derived_dim, (op, a, b, k)
    return Dim, (dim.lengths if dim.lengths is not None else dim.size, dim.name)


def global_dim(name: str) -> Dim:
    """One of the process's global dims (batch_dim, single_step_dim): the same object, not a new Dim."""
    if name not in _GLOBAL_DIMS:
        raise ValueError(f"dimtorch: no global dim {name!r}")
    return getattr(_global_dims, name)


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
    if t.raw_tensor is None:
        return rebuild_template, (t.name, t.dims, t.dtype, t.sparse_dim, t.feature_dim)
    return rebuild_tensor, (t.raw, t.dims, t.sparse_dim, t.feature_dim, t.name)


def rebuild_template(name, dims, dtype, sparse_dim, feature_dim) -> Tensor:
    """A template (RETURNN's Tensor without raw): dims, dtype and markers."""
    if not isinstance(dtype, str) or not (name is None or isinstance(name, str)):
        raise TypeError("dimtorch: cannot unpickle a template from these fields")
    t = object.__new__(Tensor)
    t.name, t.sparse_dim, t.feature_dim, t._template_dtype = name, sparse_dim, feature_dim, dtype
    t.dims = dims
    return t


def rebuild_tensor(raw, dims, sparse_dim, feature_dim, name) -> Tensor:
    return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim, name=name)


def register_safe_globals() -> None:
    """Lets torch.load(weights_only=True) rebuild Dims and Tensors (called when dimtorch is imported)."""
    torch.serialization.add_safe_globals([Dim, Tensor, rebuild_tensor, rebuild_derived_dim, rebuild_template, global_dim])
