"""Pickling of Dim and Tensor: a pickled Dim is rebuilt as a new Dim with the same size, lengths or
derivation. Identity is per process, so the Dims of one pickled object graph (a module and its
dims, say) come back as one consistent set of new Dims, shared as they were shared before."""
from __future__ import annotations

from ._C import Dim, Tensor, ceildiv


def reduce_dim(dim: Dim):
    """(callable, args) for Dim.__reduce__."""
    derivation = dim.derivation
    if derivation is not None:
        op, a, b, k = derivation
        return rebuild_derived_dim, (op, a, b, k)
    return Dim, (dim.dyn_size if dim.dyn_size is not None else dim.size, dim.name)


def rebuild_derived_dim(op: str, a: Dim, b, k: int) -> Dim:
    """The dim math that made a dim (so that e.g. time + 1 stays time + 1 of the rebuilt time)."""
    if op == "add":
        return a + k
    if op == "sub":
        return a - k
    if op == "mul":
        return a * k
    if op == "floordiv":
        return a // k
    if op == "ceildiv":
        return ceildiv(a, k)
    if op == "concat":
        return a + b
    raise ValueError(f"dimtorch: cannot unpickle a dim made by {op!r}")


def reduce_tensor(t: Tensor):
    """(callable, args) for Tensor.__reduce__."""
    return rebuild_tensor, (t.raw, t.dims, t.sparse_dim, t.feature_dim, t.name)


def rebuild_tensor(raw, dims, sparse_dim, feature_dim, name) -> Tensor:
    return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim, name=name)
