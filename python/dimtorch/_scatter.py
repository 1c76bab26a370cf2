"""scatter: adding values into a dim at positions given by an index tensor (the inverse direction of gather)."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from . import _C, _in_graph, _tracing
from ._C import Dim, Tensor
from ._shape_ops import axis_of, check_tensor, dim_str, dims_arg, dims_str, keep_markers

_MASK = 0  # kind of _C._dim_cached_raw: the bool mask of valid frames
_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


_SCALARS: dict = {}  # (value, dtype) -> 0-dim host tensor; a few per program (out dim sizes)


def _host_scalar(value: int, dtype: torch.dtype) -> torch.Tensor:
    """A cached 0-dim host tensor: torch.where takes it as a scalar on any device, and skips
    wrapping a Python int on every call."""
    key = (value, dtype)
    t = _SCALARS.get(key)
    if t is None:
        if len(_SCALARS) >= 64:
            _SCALARS.clear()
        t = _SCALARS[key] = torch.tensor(value, dtype=dtype)
    return t


def scatter(x: Tensor, *, indices: Tensor, indices_dim: Union[Dim, Sequence[Dim]], out_dim: Optional[Dim] = None
            ) -> Tensor:
    """Scatter-add: the entries of x along `indices_dim` (one dim or several) are added into
    `out_dim` at the positions `indices` gives (an int Tensor whose sparse_dim is out_dim, over
    indices_dim and optionally batch dims of x). The result has x's dims with indices_dim replaced
    by out_dim (at the place of the first indices dim); positions nothing is added to hold 0.
    Dims of indices other than indices_dim are batch dims: each batch entry scatters into its own
    row. Padding entries of dynamic dims among indices_dim add nothing (x and indices are masked
    there, so garbage indices in the padding are harmless). Indices must be in range at valid
    entries (torch checks on CPU; nothing is read back on the host). While tracing, masks are built
    in the graph from the lengths, and a dynamic out_dim is an error (no tensor gives its padded
    size: its max length is data)."""
    caller = "dimtorch.scatter()"
    check_tensor(x, caller)
    check_tensor(indices, caller, what="indices")
    in_dims = dims_arg(indices_dim, caller, "indices_dim")
    if not in_dims:
        raise ValueError(f"{caller}: indices_dim is empty")
    for d in in_dims:
        axis_of(x, d, caller, what="indices_dim")
        axis_of(indices, d, caller, what="indices_dim", of="indices")
    xr, ir = x.raw, indices.raw
    if ir.dtype not in _INT_DTYPES:
        raise TypeError(f"{caller}: indices must be of an integer dtype, got {indices.dtype}")
    if out_dim is None:
        out_dim = indices.sparse_dim
        if out_dim is None:
            raise ValueError(f"{caller}: indices have no sparse_dim and no out_dim is given (indices dims: "
                             f"{dims_str(indices.dims)})")
    elif indices.sparse_dim is not None and indices.sparse_dim is not out_dim:
        raise ValueError(f"{caller}: the sparse_dim of indices is {dim_str(indices.sparse_dim)}, but out_dim is "
                         f"{dim_str(out_dim)}")
    x_dims, i_dims = x.dims, indices.dims
    if out_dim in x_dims:  # Dim equality is identity
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} is already a dim of x (dims: {dims_str(x_dims)})")
    n_out = out_dim.size
    # Only a dynamic out_dim or indices dim reads lengths: the in-graph form differs there alone.
    in_graph = (n_out is None or any(d.dyn_size is not None for d in in_dims)) and _tracing.tracing()
    if n_out is None:
        if out_dim.dyn_size is None:
            raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} takes its size from data; it needs a size")
        n_out = _in_graph.padded_size(out_dim, caller) if in_graph else out_dim.get_max_size()
    dynamic = []
    x_shape, i_shape = xr.shape, ir.shape
    for i, d in enumerate(i_dims):
        if d not in x_dims:
            extra = [e for e in i_dims if e not in x_dims]
            raise ValueError(f"{caller}: indices have dims that x lacks ({dims_str(extra)}); x has "
                             f"({dims_str(x_dims)})")
        sx, si = x_shape[x_dims.index(d)], i_shape[i]
        if sx != si:
            raise ValueError(f"{caller}: dim {dim_str(d)} has size {sx} in x but {si} in indices")
        if d.dyn_size is not None:
            dynamic.append(d)
    if len(in_dims) == 1 and (in_dims[0].dyn_size is None or len(dynamic) == 1):
        # One indices dim: one scatter_add_ along it, x in its own layout. The padding of a dynamic
        # one is sent to an extra last row that is cut off: no where over x, garbage indices unused.
        d = in_dims[0]
        a = x_dims.index(d)
        ir = indices.raw_aligned(x_dims)
        out_shape = list(x_shape)
        out_shape[a] = n_out
        if d.dyn_size is not None:
            pos = []
            for b in d.dyn_size.dims:
                if b not in x_dims:
                    raise ValueError(f"{caller}: the lengths of {dim_str(d)} vary over {dim_str(b)}, which is not a "
                                     f"dim of x (dims: {dims_str(x_dims)})")
                pos.append(x_dims.index(b))
            pos.append(a)
            if in_graph:
                ir = torch.where(_tracing.mask_raw(d, x_dims, x_shape, xr.device), ir, n_out)
            else:
                mask = _C._dim_cached_raw(_MASK, d, pos, len(x_dims), x_shape[a], xr.device)
                ir = torch.where(mask, ir, _host_scalar(n_out, ir.dtype))
            out_shape[a] = n_out + 1
        if ir.dtype != torch.int64:
            ir = ir.to(torch.int64)
        # expand_as, not expand(shape): torch parses a Size argument element by element.
        raw = xr.new_zeros(out_shape).scatter_add_(a, ir.expand_as(xr), xr)
        if d.dyn_size is not None:
            raw = raw.narrow(a, 0, n_out)
        return keep_markers(x, raw, x_dims[:a] + (out_dim,) + x_dims[a + 1:])
    common = [d for d in x_dims if d in i_dims and d not in in_dims]
    rest = [d for d in x.dims if not any(d is e for e in common) and not any(d is e for e in in_dims)]
    if in_graph and any(d.dyn_size is not None for d in in_dims):
        # The same masking from masks built in the graph (frames beyond the max lengths kept, masked).
        order = tuple(d for d in x.dims if any(d is e for e in indices.dims))
        mask = _in_graph.valid_mask(order, tuple(x.raw.shape[x.dims.index(d)] for d in order), x.raw.device)
        if mask is not None:
            mask = Tensor(mask.expand(tuple(x.raw.shape[x.dims.index(d)] for d in order)), order)
            x = Tensor(torch.where(mask.raw_aligned(x.dims), x.raw, 0), x.dims, feature_dim=x.feature_dim)
            indices = Tensor(torch.where(mask.raw_aligned(indices.dims), indices.raw, 0), indices.dims)
    elif any(d.dyn_size is not None for d in in_dims):
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
