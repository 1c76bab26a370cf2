"""Ops that rearrange axes without moving data between sequences: merge_dims, split_dims, expand_dim, squeeze, replace_dim."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

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


def axis_of(x: Tensor, dim, caller: str, what: str = "axis", of: str = "x") -> int:
    """Raw axis of `dim` in `x`, or a clear error naming x's dims."""
    if not isinstance(dim, Dim):
        raise TypeError(f"{caller}: {what} must be a Dim, got {type(dim).__name__}")
    for i, d in enumerate(x.dims):
        if d is dim:
            return i
    raise ValueError(f"{caller}: {what} {dim_str(dim)} is not a dim of {of} (dims: {dims_str(x.dims)})")


def keep_markers(x: Tensor, raw, dims: tuple) -> Tensor:
    """Tensor over `dims` keeping x's sparse_dim, and its feature_dim where that is still in `dims`."""
    feature_dim = x.feature_dim if x.feature_dim is not None and any(d is x.feature_dim for d in dims) else None
    return Tensor(raw, dims, sparse_dim=x.sparse_dim, feature_dim=feature_dim)


def merge_dims(x: Tensor, *, dims: Sequence[Dim], out_dim: Optional[Dim] = None):
    """Merges `dims` (all in x, in this order: the first is the slowest-varying) into one dim at the
    place of the first of them in x; returns (tensor, out_dim). Merged dims need not be adjacent:
    they are permuted into place first. A new out_dim is static when all merged dims are static,
    else (sizes from data) a `Dim(None)`. Merging a dynamic dim is not implemented yet."""
    caller = "dimtorch.merge_dims()"
    check_tensor(x, caller)
    if isinstance(dims, Dim):
        dims = (dims,)
    dims = tuple(dims)
    if not dims:
        raise ValueError(f"{caller}: dims is empty; give the dims to merge")
    axes = [axis_of(x, d, caller, what="dims entry") for d in dims]
    if len(set(axes)) != len(axes):
        raise ValueError(f"{caller}: dims lists a dim twice ({dims_str(dims)})")
    dynamic = [d for d in dims if d.dyn_size is not None]
    if dynamic:
        raise NotImplementedError(
            f"{caller}: merging the dynamic dim {dim_str(dynamic[0])} is not implemented yet "
            f"(dims: {dims_str(dims)})")
    sizes = [x.raw.shape[a] for a in axes]
    total = math.prod(sizes)
    if out_dim is None:
        name = "*".join(str(d.name) for d in dims)
        out_dim = Dim(total, name=name) if all(d.size is not None for d in dims) else Dim(None, name=name)
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    elif out_dim.dyn_size is not None or (out_dim.size is not None and out_dim.size != total):
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} does not fit the merged size {total} "
                         f"(dims: {dims_str(dims)}, sizes {sizes})")
    elif any(d is out_dim for d in x.dims):
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} is already a dim of x (dims: {dims_str(x.dims)})")
    first = min(axes)
    rest = [i for i in range(x.raw.dim()) if i not in axes]
    before = [i for i in rest if i < first]
    after = [i for i in rest if i > first]
    perm = before + axes + after
    raw = x.raw if perm == sorted(perm) else x.raw.permute(perm)
    shape = [x.raw.shape[i] for i in before] + [total] + [x.raw.shape[i] for i in after]
    out_dims = tuple(x.dims[i] for i in before) + (out_dim,) + tuple(x.dims[i] for i in after)
    return keep_markers(x, raw.reshape(shape), out_dims), out_dim


def split_dims(x: Tensor, *, axis: Dim, dims: Sequence[Dim]) -> Tensor:
    """Splits `axis` into static `dims` (the first is the slowest-varying), in its place; the
    product of their sizes must be the size of `axis`."""
    caller = "dimtorch.split_dims()"
    check_tensor(x, caller)
    a = axis_of(x, axis, caller)
    if isinstance(dims, Dim):
        dims = (dims,)
    dims = tuple(dims)
    for d in dims:
        if not isinstance(d, Dim):
            raise TypeError(f"{caller}: dims must be Dims, got {type(d).__name__}")
        if d.size is None:
            raise ValueError(f"{caller}: dims must be static, {dim_str(d)} is not (dims: {dims_str(dims)})")
        if any(d is e for e in x.dims if e is not axis):
            raise ValueError(f"{caller}: {dim_str(d)} is already a dim of x (dims: {dims_str(x.dims)})")
    if axis.dyn_size is not None:
        raise NotImplementedError(f"{caller}: splitting the dynamic dim {dim_str(axis)} is not implemented yet")
    size = x.raw.shape[a]
    total = math.prod(d.size for d in dims)
    if total != size:
        raise ValueError(f"{caller}: the sizes of dims ({dims_str(dims)}) multiply to {total}, "
                         f"but axis {dim_str(axis)} has size {size}")
    shape = list(x.raw.shape[:a]) + [d.size for d in dims] + list(x.raw.shape[a + 1:])
    out_dims = x.dims[:a] + dims + x.dims[a + 1:]
    return keep_markers(x, x.raw.reshape(shape), out_dims)


def expand_dim(x: Tensor, dim: Dim) -> Tensor:
    """x broadcast over the new static `dim`, put first; a view (torch expand), no copy."""
    caller = "dimtorch.expand_dim()"
    check_tensor(x, caller)
    if not isinstance(dim, Dim):
        raise TypeError(f"{caller}: dim must be a Dim, got {type(dim).__name__}")
    if dim.size is None:
        raise ValueError(f"{caller}: dim {dim_str(dim)} must be static (a size known without data)")
    if any(d is dim for d in x.dims):
        raise ValueError(f"{caller}: dim {dim_str(dim)} is already a dim of x (dims: {dims_str(x.dims)})")
    raw = x.raw.unsqueeze(0).expand(dim.size, *x.raw.shape)
    return keep_markers(x, raw, (dim,) + x.dims)


def squeeze(x: Tensor, *, axis: Dim) -> Tensor:
    """x without `axis`, whose raw size must be 1."""
    caller = "dimtorch.squeeze()"
    check_tensor(x, caller)
    a = axis_of(x, axis, caller)
    if x.raw.shape[a] != 1:
        raise ValueError(f"{caller}: axis {dim_str(axis)} has size {x.raw.shape[a]}, not 1 "
                         f"(dims: {dims_str(x.dims)}, shape {tuple(x.raw.shape)})")
    return keep_markers(x, x.raw.squeeze(a), x.dims[:a] + x.dims[a + 1:])


def replace_dim(x: Tensor, *, in_dim: Dim, out_dim: Optional[Dim] = None):
    """x with `in_dim` renamed to `out_dim` (same raw data); returns (tensor, out_dim). Without
    out_dim, a new dim of the same size (the same lengths for a dynamic dim) is made. A static
    out_dim must have the raw size of in_dim; a dynamic one a max length that fits in it."""
    caller = "dimtorch.replace_dim()"
    check_tensor(x, caller)
    a = axis_of(x, in_dim, caller, what="in_dim")
    size = x.raw.shape[a]
    if out_dim is None:
        if in_dim.dyn_size is not None:
            out_dim = Dim(in_dim.dyn_size, name=in_dim.name)
        else:
            out_dim = Dim(in_dim.size, name=in_dim.name)
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    else:
        if any(d is out_dim for d in x.dims if d is not in_dim):
            raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} is already a dim of x (dims: {dims_str(x.dims)})")
        fits = (out_dim.size == size if out_dim.size is not None
                else out_dim.dyn_size is None or out_dim.get_max_size() <= size)
        if not fits:
            raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} does not fit the size {size} of "
                             f"in_dim {dim_str(in_dim)}")
    dims = x.dims[:a] + (out_dim,) + x.dims[a + 1:]
    sparse_dim = out_dim if x.sparse_dim is in_dim else x.sparse_dim
    feature_dim = out_dim if x.feature_dim is in_dim else x.feature_dim
    return Tensor(x.raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim), out_dim
