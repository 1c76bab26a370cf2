"""scatter: values put into a dim at positions given by an index tensor (the inverse of gather), reduced by sum,
max, min, mean, logsumexp, logmeanexp or argmax where positions repeat."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from .. import _C
from .._core import sizes as _sizes, tracing as _tracing
from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, dims_arg, dims_str, keep_markers, lengths_positions
from ._support import int32_ones, names_errors

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


def scatter(x: Tensor, /, *, indices: Tensor, indices_dim: Union[Dim, Sequence[Dim]], mode: str = "sum",
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

    The common call (one indices dim; mode "sum" without fill_value, or any other mode of a float x) is
    dimtorch._C.scatter, which comes here for the others. While tracing, masks are built in the graph from the lengths, and a
    dynamic out_dim is an error (no tensor gives its padded size: its max length is data)."""
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
    # Only a dynamic out_dim or indices dim reads lengths: the in-graph form differs there alone.
    in_graph = ((any(d.size is None for d in out_dims_given) or any(d.lengths is not None for d in in_dims))
                and _tracing.tracing())
    if len(out_dims_given) == 1:
        n_out = out_dim.size
        if n_out is None:
            if out_dim.lengths is None:
                raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} takes its size from data; it needs a size")
            n_out = _sizes.padded_size(out_dim, caller)
    else:
        for d in out_dims_given:
            if d.size is None:
                raise ValueError(f"{caller}: several out dims must be static, {dim_str(d)} is not")
        n_out = math.prod([d.size for d in out_dims_given])
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
        if d.lengths is not None:
            dynamic.append(d)
    if (mode == "sum" and fill_value in (None, 0) and use_mask and len(out_dims_given) == 1 and len(in_dims) == 1
            and (in_dims[0].lengths is None or len(dynamic) == 1)):
        # One indices dim: one scatter_add_ along it, x in its own layout. The padding of a dynamic
        # one is sent to an extra last row that is cut off: no where over x, garbage indices unused.
        d = in_dims[0]
        a = x_dims.index(d)
        ir = indices.raw_aligned(x_dims)
        out_shape = list(x_shape)
        out_shape[a] = n_out
        if d.lengths is not None:
            pos = lengths_positions(d, x_dims, caller, "is not a dim of x (dims: {dims})")
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
        if d.lengths is not None:
            raw = raw.narrow(a, 0, n_out)
        return keep_markers(x, raw, x_dims[:a] + (out_dim,) + x_dims[a + 1:])
    return _scatter_reduce(x, indices, in_dims, out_dims_given, n_out, mode, fill_value, use_mask, caller)


def _reduce_along(xr: torch.Tensor, ir: torch.Tensor, valid, a: int, n_out: int, mode: str, fill_value
                  ) -> torch.Tensor:
    """The scatter of xr along axis a by the int64 ir (broadcastable to xr: size 1 on other axes), reduced
    by mode, into n_out rows. Entries where the bool `valid` (broadcastable like ir, or None) is False go
    to an extra last row that is cut off; their values are replaced by a neutral one where they could
    reach a backward pass (a NaN there would be a NaN gradient)."""
    rows = n_out
    if valid is not None:
        ir = torch.where(valid, ir, _host_scalar(n_out, torch.int64))
        rows += 1
    if mode == "mean" and not xr.is_floating_point():
        xr = xr.to(torch.float32)
    if valid is not None and mode not in ("sum", "mean"):
        xr = torch.where(valid, xr, _extreme(xr.dtype, highest=mode == "min"))
    out_shape = list(xr.shape)
    out_shape[a] = rows
    index = ir.expand_as(xr)
    if mode in ("sum", "mean", "max", "min"):
        reduce = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}[mode]
        fill = fill_value
        if fill is None:
            fill = _extreme(xr.dtype, highest=mode == "min") if mode in ("max", "min") else 0
        raw = xr.new_full(out_shape, fill).scatter_reduce_(a, index, xr, reduce, include_self=False)
    else:
        count_shape = list(ir.shape)
        count_shape[a] = rows
        counts = torch.zeros(count_shape, dtype=torch.int64, device=xr.device).scatter_add_(
            a, ir, torch.ones((), dtype=torch.int64, device=xr.device).expand(ir.shape))
        filled = counts > 0
        with torch.no_grad():
            top = xr.new_full(out_shape, _extreme(xr.dtype, highest=False)).scatter_reduce_(
                a, index, xr, "amax", include_self=False)
        if mode == "argmax":
            nk = xr.shape[a]
            positions = torch.arange(nk, device=xr.device).view([nk if i == a else 1 for i in range(xr.dim())])
            candidates = torch.where(xr == top.gather(a, index), positions, nk)
            raw = torch.full(out_shape, nk, dtype=torch.int64, device=xr.device).scatter_reduce_(
                a, index, candidates, "amin")
            found = filled & (raw < nk)  # (NaN entries are nobody's max)
            raw = torch.where(found, raw, -1 if fill_value is None else fill_value)
        else:
            shift = torch.where(torch.isfinite(top), top, 0.0)
            total = xr.new_zeros(out_shape).scatter_add_(a, index, torch.exp(xr - shift.gather(a, index)))
            raw = torch.log(total) + shift
            if mode == "logmeanexp":
                raw = raw - torch.log(counts.clamp(min=1).to(raw.dtype))
            if fill_value is not None:
                raw = torch.where(filled, raw, fill_value)
    return raw.narrow(a, 0, n_out) if rows != n_out else raw


def _scatter_reduce(x: Tensor, indices: Tensor, in_dims: tuple, out_dims: tuple, n_out: int, mode: str, fill_value,
                    use_mask: bool, caller: str) -> Tensor:
    """Every mode: one indices dim in x's own layout (indices aligned to it, as torch broadcasts), several
    flattened to one axis first (x as (batch dims, indices dims, rest))."""
    masked = use_mask and any(d.lengths is not None for d in in_dims)
    if masked:
        for d in in_dims:
            for b in d.lengths.dims if d.lengths is not None else ():
                if b not in x.dims:  # Dim equality is identity
                    raise ValueError(f"{caller}: the lengths of {dim_str(d)} vary over {dim_str(b)}, which is not "
                                     f"a dim of x (dims: {dims_str(x.dims)})")
    if len(in_dims) == 1:
        d = in_dims[0]
        layout, a = x.dims, x.dims.index(d)
        xr = x.raw
        ir = indices.raw_aligned(layout)
    else:
        # Batch dims: x's dims that indices have, and the lengths' dims of dynamic indices dims.
        in_set = set(map(id, in_dims))
        wanted = set(id(b) for b in indices.dims)
        if masked:
            wanted.update(id(b) for d in in_dims if d.lengths is not None for b in d.lengths.dims)
        common = tuple(b for b in x.dims if id(b) in wanted and id(b) not in in_set)
        rest = tuple(b for b in x.dims if id(b) not in wanted and id(b) not in in_set)
        layout, a = common + in_dims + rest, len(common)
        xr = x.raw_aligned(layout)
        ir = indices.raw_aligned(layout)
    if ir.dtype != torch.int64:
        ir = ir.to(torch.int64)
    valid = None
    if masked:
        for d in in_dims:
            if d.lengths is not None:
                if _tracing.tracing():
                    m = _tracing.mask_raw(d, layout, xr.shape, xr.device)
                else:
                    pos = tuple(layout.index(b) for b in d.lengths.dims) + (layout.index(d),)
                    m = _C._dim_cached_raw(_MASK, d, pos, len(layout), xr.shape[layout.index(d)], xr.device)
                valid = m if valid is None else valid & m
    if len(in_dims) > 1:
        # The indices dims flattened into one axis at a (the mask and indices broadcast like x).
        k = len(in_dims)
        shape = list(xr.shape)
        flat = shape[:a] + [math.prod(shape[a:a + k])] + shape[a + k:]
        xr = xr.reshape(flat)
        ir = ir.expand(shape[:a + k] + list(ir.shape[a + k:])).reshape(flat[:a + 1] + list(ir.shape[a + k:]))
        if valid is not None:
            valid = valid.expand(shape[:a + k] + list(valid.shape[a + k:])).reshape(
                flat[:a + 1] + list(valid.shape[a + k:]))
    raw = _reduce_along(xr, ir, valid, a, n_out, mode, fill_value)
    if len(out_dims) > 1:
        raw = raw.reshape(list(raw.shape[:a]) + [d.size for d in out_dims] + list(raw.shape[a + 1:]))
    if len(in_dims) == 1:
        flat_dims = x.dims[:a] + out_dims + x.dims[a + 1:]
        result_dims = flat_dims
    else:
        flat_dims = layout[:a] + out_dims + layout[a + len(in_dims):]
        result_dims = []
        for b in x.dims:
            if b is in_dims[0]:
                result_dims.extend(out_dims)
            elif b not in in_dims:
                result_dims.append(b)
        result_dims = tuple(result_dims)
    if mode == "argmax":
        out = Tensor(raw, flat_dims, sparse_dim=in_dims[0])
    else:
        out = keep_markers(x, raw, flat_dims)
    return out if flat_dims == result_dims else out.copy_transpose(result_dims)


@names_errors("dimtorch.scatter_count()")
def scatter_count(*, indices: Tensor, indices_dim: Union[Dim, Sequence[Dim]],
                  out_dim: Optional[Union[Dim, Sequence[Dim]]] = None, fill_value: Optional[int] = None) -> Tensor:
    """How often each position of out_dim (default indices' sparse_dim) occurs in `indices` along
    indices_dim (rf.scatter_count): int32 counts over indices' other dims and out_dim, padding frames of
    indices_dim not counted; positions that no index hits get fill_value (default 0)."""
    caller = "dimtorch.scatter_count()"
    check_tensor(indices, caller, what="indices")
    if fill_value is not None and (isinstance(fill_value, bool) or not isinstance(fill_value, int)):
        raise TypeError(f"{caller}: fill_value must be an int or None, got {fill_value!r}")
    counts = _scatter_ones(indices, indices_dim, out_dim, caller)
    if fill_value is None or fill_value == 0:
        return counts
    return Tensor(torch.where(counts.raw > 0, counts.raw, fill_value), counts.dims)


def _scatter_ones(indices, indices_dim, out_dim, caller: str) -> Tensor:
    """Counts as dt.scatter of int32 ones (its fast path takes the common call and masks the padding)."""
    raw = indices.raw
    ones = Tensor(int32_ones(raw.shape, raw.device, _tracing.tracing()), indices.dims)
    try:
        counts = _C.scatter(ones, indices=indices, indices_dim=indices_dim, out_dim=out_dim)
    except (TypeError, ValueError) as e:
        raise type(e)(str(e).replace("dimtorch.scatter()", caller)) from None
    return counts
