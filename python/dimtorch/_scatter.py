"""scatter: values put into a dim at positions given by an index tensor (the inverse of gather), reduced by sum,
max, min, mean, logsumexp, logmeanexp or argmax where positions repeat."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from . import _C
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


_MODES = ("sum", "max", "min", "mean", "logsumexp", "logmeanexp", "argmax")


def _extreme(dtype: torch.dtype, highest: bool):
    """The value that never wins a max (highest=False) or a min (highest=True) in `dtype`."""
    if dtype.is_floating_point:
        return float("inf") if highest else float("-inf")
    if dtype == torch.bool:
        return highest
    info = torch.iinfo(dtype)
    return info.max if highest else info.min


def scatter(x: Tensor, *, indices: Tensor, indices_dim: Union[Dim, Sequence[Dim]], mode: str = "sum",
            fill_value=None, out_dim: Optional[Union[Dim, Sequence[Dim]]] = None, use_mask: Optional[bool] = None
            ) -> Tensor:
    """The entries of x along `indices_dim` (one dim or several) put into `out_dim` at the positions
    `indices` gives (an int Tensor whose sparse_dim is out_dim, over indices_dim and optionally batch
    dims of x); entries that meet at one position are reduced by `mode`:
    "sum" (the default), "max", "min", "mean", "logsumexp", "logmeanexp" (log of the mean of exp), or
    "argmax" (the position along indices_dim, a single dim, of the max; int64 with sparse_dim
    indices_dim). The result has x's dims with indices_dim replaced by out_dim (at the place of the
    first indices dim). Positions nothing is put into hold `fill_value`, by default the mode's
    neutral result: 0 for sum and mean, -inf (the dtype's min) for max, logsumexp and logmeanexp,
    +inf (the dtype's max) for min, -1 for argmax. `out_dim` may be several static dims: indices then
    count in their merged, row-major order. Dims of indices other than indices_dim are batch dims:
    each batch entry scatters into its own row. With use_mask (the default), padding entries of
    dynamic dims among indices_dim take part in nothing (garbage indices in the padding are
    harmless); use_mask=False uses them as they are. Mean of an int x is a float32 mean. Indices
    must be in range at valid entries (torch checks on CPU; nothing is read back on the host).

    The common call (mode "sum", one indices dim, no fill_value) is dimtorch._C.scatter, which
    comes here for the others."""
    caller = "dimtorch.scatter()"
    check_tensor(x, caller)
    check_tensor(indices, caller, what="indices")
    if mode not in _MODES:
        raise ValueError(f"{caller}: mode must be one of {', '.join(map(repr, _MODES))}, got {mode!r}")
    if fill_value is not None and (isinstance(fill_value, bool) or not isinstance(fill_value, (int, float))):
        raise TypeError(f"{caller}: fill_value must be a Python number or None, got {fill_value!r}")
    if use_mask is None:
        use_mask = True
    elif not isinstance(use_mask, bool):
        raise TypeError(f"{caller}: use_mask must be a bool or None, got {use_mask!r}")
    in_dims = dims_arg(indices_dim, caller, "indices_dim")
    if not in_dims:
        raise ValueError(f"{caller}: indices_dim is empty")
    if mode == "argmax" and len(in_dims) != 1:
        raise ValueError(f"{caller}: mode 'argmax' takes one indices_dim (the positions it gives are along it), got "
                         f"({dims_str(in_dims)})")
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
    out_dims_given = dims_arg(out_dim, caller, "out_dim")
    if len(out_dims_given) == 1:
        out_dim = out_dims_given[0]
        if indices.sparse_dim is not None and indices.sparse_dim is not out_dim:
            raise ValueError(f"{caller}: the sparse_dim of indices is {dim_str(indices.sparse_dim)}, but out_dim is "
                             f"{dim_str(out_dim)}")
    elif not out_dims_given:
        raise ValueError(f"{caller}: out_dim is empty")
    x_dims, i_dims = x.dims, indices.dims
    for d in out_dims_given:
        if d in x_dims:  # Dim equality is identity
            raise ValueError(f"{caller}: out_dim {dim_str(d)} is already a dim of x (dims: {dims_str(x_dims)})")
    if len(out_dims_given) == 1:
        n_out = out_dim.size
        if n_out is None:
            if out_dim.dyn_size is None:
                raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} takes its size from data; it needs a size")
            n_out = out_dim.get_max_size()
    else:
        for d in out_dims_given:
            if d.size is None:
                raise ValueError(f"{caller}: several out dims must be static, {dim_str(d)} is not")
        n_out = math.prod(d.size for d in out_dims_given)
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
    if (mode == "sum" and fill_value in (None, 0) and use_mask and len(out_dims_given) == 1 and len(in_dims) == 1
            and (in_dims[0].dyn_size is None or len(dynamic) == 1)):
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
    return _scatter_reduce(x, indices, in_dims, out_dims_given, n_out, mode, fill_value, use_mask, caller)


def _scatter_reduce(x: Tensor, indices: Tensor, in_dims: tuple, out_dims: tuple, n_out: int, mode: str, fill_value,
                    use_mask: bool, caller: str) -> Tensor:
    """Every mode, in one layout: x as (common, indices dims flattened, rest), indices as (common, flat);
    the padding of dynamic indices dims is sent to an extra last row that is cut off, and its values
    are replaced by a neutral one (no NaN reaches a value or a gradient)."""
    in_set = set(map(id, in_dims))
    # Batch dims: x's dims that indices have, and the lengths' dims of dynamic indices dims (a mask over them).
    wanted = set(id(d) for d in indices.dims)
    if use_mask:
        for d in in_dims:
            if d.dyn_size is not None:
                for b in d.dyn_size.dims:
                    if b not in x.dims:
                        raise ValueError(f"{caller}: the lengths of {dim_str(d)} vary over {dim_str(b)}, which is not "
                                         f"a dim of x (dims: {dims_str(x.dims)})")
                    wanted.add(id(b))
    common = tuple(d for d in x.dims if id(d) in wanted and id(d) not in in_set)
    rest = tuple(d for d in x.dims if id(d) not in wanted and id(d) not in in_set)
    layout = common + in_dims
    xr = x.raw_aligned(layout + rest)
    c_sizes = list(xr.shape[:len(common)])
    k_sizes = list(xr.shape[len(common):len(layout)])
    r_sizes = list(xr.shape[len(layout):])
    nc, nk, nr = math.prod(c_sizes), math.prod(k_sizes), math.prod(r_sizes)
    ir = indices.raw_aligned(layout).to(torch.int64).expand(c_sizes + k_sizes).reshape(nc, nk)
    xf = xr.reshape(nc, nk, nr)
    rows = n_out
    valid = None
    if use_mask and any(d.dyn_size is not None for d in in_dims):
        for d in in_dims:
            if d.dyn_size is not None:
                pos = tuple(layout.index(b) for b in d.dyn_size.dims) + (layout.index(d),)
                m = _C._dim_cached_raw(_MASK, d, pos, len(layout), xr.shape[layout.index(d)], xr.device)
                valid = m if valid is None else valid & m
        valid = valid.expand(c_sizes + k_sizes).reshape(nc, nk)
        ir = torch.where(valid, ir, _host_scalar(n_out, torch.int64))
        rows = n_out + 1
    if mode == "mean" and not xf.is_floating_point():
        xf = xf.to(torch.float32)
    index = ir.view(nc, nk, 1).expand(nc, nk, nr)
    if mode in ("logsumexp", "logmeanexp", "argmax", "max", "min") and valid is not None:
        neutral = _extreme(xf.dtype, highest=mode == "min")
        xf = torch.where(valid.view(nc, nk, 1), xf, neutral)
    if mode in ("sum", "mean", "max", "min"):
        reduce = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}[mode]
        fill = fill_value
        if fill is None:
            fill = _extreme(xf.dtype, highest=mode == "min") if mode in ("max", "min") else 0
        raw = xf.new_full((nc, rows, nr), fill).scatter_reduce(1, index, xf, reduce, include_self=False)
    else:
        counts = torch.zeros((nc, rows), dtype=torch.int64, device=xf.device).scatter_add_(
            1, ir, torch.ones((), dtype=torch.int64, device=xf.device).expand(nc, nk))
        filled = counts.view(nc, rows, 1) > 0
        with torch.no_grad():
            top = xf.new_full((nc, rows, nr), float("-inf") if xf.is_floating_point() else _extreme(xf.dtype, False))
            top = top.scatter_reduce(1, index, xf, "amax", include_self=False)
        if mode == "argmax":
            at_max = xf == top.gather(1, index)
            positions = torch.arange(nk, device=xf.device).view(1, nk, 1)
            candidates = torch.where(at_max, positions, nk)
            raw = torch.full((nc, rows, nr), nk, dtype=torch.int64, device=xf.device)
            raw = raw.scatter_reduce(1, index, candidates, "amin", include_self=True)
            found = filled & (raw < nk)  # (NaN entries are nobody's max)
            raw = torch.where(found, raw, -1 if fill_value is None else fill_value)
        else:
            shift = torch.where(torch.isfinite(top), top, 0.0)
            total = xf.new_zeros((nc, rows, nr)).scatter_add(1, index, torch.exp(xf - shift.gather(1, index)))
            raw = torch.log(total) + shift
            if mode == "logmeanexp":
                raw = raw - torch.log(counts.clamp(min=1).to(raw.dtype)).view(nc, rows, 1)
            if fill_value is not None:
                raw = torch.where(filled, raw, fill_value)
    if rows != n_out:
        raw = raw.narrow(1, 0, n_out)
    out_sizes = [d.size if len(out_dims) > 1 else n_out for d in out_dims]
    raw = raw.reshape(c_sizes + out_sizes + r_sizes)
    flat_dims = common + out_dims + rest
    result_dims = []
    for d in x.dims:
        if d is in_dims[0]:
            result_dims.extend(out_dims)
        elif id(d) not in in_set:
            result_dims.append(d)
    result_dims = tuple(result_dims)
    if mode == "argmax":
        out = Tensor(raw, flat_dims, sparse_dim=in_dims[0])
    else:
        out = keep_markers(x, raw, flat_dims)
    return out if flat_dims == result_dims else out.copy_transpose(result_dims)
