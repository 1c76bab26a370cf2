"""scatter: adding values into a dim at positions given by an index tensor (the inverse direction of gather)."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from ._C import Dim, Tensor
from ._shape_ops import axis_of, check_tensor, dim_str, dims_str, keep_markers

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def scatter(x: Tensor, *, indices: Tensor, indices_dim: Union[Dim, Sequence[Dim]], out_dim: Optional[Dim] = None
            ) -> Tensor:
    """Scatter-add: the entries of x along `indices_dim` (one dim or several) are added into
    `out_dim` at the positions `indices` gives (an int Tensor whose sparse_dim is out_dim, over
    indices_dim and optionally batch dims of x). The result has x's dims with indices_dim replaced
    by out_dim (at the place of the first indices dim); positions nothing is added to hold 0.
    Dims of indices other than indices_dim are batch dims: each batch entry scatters into its own
    row. Padding entries of dynamic dims among indices_dim add nothing (x and indices are masked
    there, so garbage indices in the padding are harmless). Indices must be in range at valid
    entries (torch checks on CPU; nothing is read back on the host)."""
    caller = "dimtorch.scatter()"
    check_tensor(x, caller)
    check_tensor(indices, caller, what="indices")
    in_dims = (indices_dim,) if isinstance(indices_dim, Dim) else tuple(indices_dim)
    if not in_dims:
        raise ValueError(f"{caller}: indices_dim is empty")
    for d in in_dims:
        axis_of(x, d, caller, what="indices_dim")
        axis_of(indices, d, caller, what="indices_dim", of="indices")
    if indices.raw.dtype not in _INT_DTYPES:
        raise TypeError(f"{caller}: indices must be of an integer dtype, got {indices.dtype}")
    if out_dim is None:
        out_dim = indices.sparse_dim
        if out_dim is None:
            raise ValueError(f"{caller}: indices have no sparse_dim and no out_dim is given (indices dims: "
                             f"{dims_str(indices.dims)})")
    elif indices.sparse_dim is not None and indices.sparse_dim is not out_dim:
        raise ValueError(f"{caller}: the sparse_dim of indices is {dim_str(indices.sparse_dim)}, but out_dim is "
                         f"{dim_str(out_dim)}")
    if any(out_dim is d for d in x.dims):
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} is already a dim of x (dims: {dims_str(x.dims)})")
    if out_dim.size is not None:
        n_out = out_dim.size
    elif out_dim.dyn_size is not None:
        n_out = out_dim.get_max_size()
    else:
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} takes its size from data; it needs a size")
    extra = [d for d in indices.dims if not any(d is e for e in x.dims)]
    if extra:
        raise ValueError(f"{caller}: indices have dims that x lacks ({dims_str(extra)}); x has ({dims_str(x.dims)})")
    common = [d for d in x.dims if any(d is e for e in indices.dims) and not any(d is e for e in in_dims)]
    for d in common + list(in_dims):
        sx, si = x.raw.shape[x.dims.index(d)], indices.raw.shape[indices.dims.index(d)]
        if sx != si:
            raise ValueError(f"{caller}: dim {dim_str(d)} has size {sx} in x but {si} in indices")
    rest = [d for d in x.dims if not any(d is e for e in common) and not any(d is e for e in in_dims)]
    if any(d.dyn_size is not None for d in in_dims):
        # One mask (over indices' dims, in x's order) zeroes the padding of both x and indices.
        from ._mask import sequence_mask  # noqa: PLC0415
        mask = sequence_mask(tuple(d for d in x.dims if any(d is e for e in indices.dims)), device=x.raw.device)
        xr, ir = x.raw, indices.raw
        for d in mask.dims:
            if d.dyn_size is not None:
                n = d.get_max_size()
                xr = xr.narrow(x.dims.index(d), 0, n)
                ir = ir.narrow(indices.dims.index(d), 0, n)
        x = Tensor(torch.where(mask.raw_aligned(x.dims), xr, 0), x.dims, feature_dim=x.feature_dim)
        indices = Tensor(torch.where(mask.raw_aligned(indices.dims), ir, 0), indices.dims)
    xr = x.raw_aligned(tuple(common) + in_dims + tuple(rest))
    ir = indices.raw_aligned(tuple(common) + in_dims)
    if ir.dtype != torch.int64:
        ir = ir.to(torch.int64)
    c_sizes = list(xr.shape[:len(common)])
    k_sizes = list(xr.shape[len(common):len(common) + len(in_dims)])
    r_sizes = list(xr.shape[len(common) + len(in_dims):])
    nc, nk, nr = math.prod(c_sizes), math.prod(k_sizes), math.prod(r_sizes)
    xf = xr.reshape(nc, nk, nr)
    index = ir.reshape(nc, nk, 1).expand(nc, nk, nr)
    raw = xf.new_zeros((nc, n_out, nr)).scatter_add(1, index, xf).reshape(c_sizes + [n_out] + r_sizes)
    flat_dims = tuple(common) + (out_dim,) + tuple(rest)
    out_dims = []
    for d in x.dims:
        if d is in_dims[0]:
            out_dims.append(out_dim)
        elif not any(d is e for e in in_dims):
            out_dims.append(d)
    out_dims = tuple(out_dims)
    out = keep_markers(x, raw, flat_dims)
    return out if flat_dims == out_dims else out.copy_transpose(out_dims)
