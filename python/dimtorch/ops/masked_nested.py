"""masked_select_nested / masked_scatter_nested: masked_select and masked_scatter over a tree of Tensors and Dims
(a beam search state), with the dynamic dims whose lengths vary over the packed dims packed alongside."""
from __future__ import annotations

from typing import Dict, Optional, Sequence

import torch

from .._core import sizes as _sizes, tracing as _tracing
from .._C import Dim, Tensor
from .._core.data_dependent import to_host
from .masked import _Selection, masked_scatter, masked_select
from .reshape import replace_dim_v2
from .._core.args import check_tensor, dims_arg, dim_str
from ._support import check_dim_map, names_errors


def _map(fn, caller: str, *trees):
    """fn over the leaves of trees of one structure (dicts, lists, tuples, namedtuples); leaves are
    everything else (Tensors, Dims, None)."""
    first = trees[0]
    if isinstance(first, (dict, list, tuple)):
        for t in trees[1:]:
            same = type(t) is type(first) and len(t) == len(first) and (
                not isinstance(first, dict) or t.keys() == first.keys())
            if not same:
                raise ValueError(f"{caller}: the trees differ in structure: {type(first).__name__} of "
                                 f"{len(first)} vs {type(t).__name__}")
    # (lists, not generators: Dynamo traces these)
    if isinstance(first, dict):
        return type(first)([(k, _map(fn, caller, *[t[k] for t in trees])) for k in first])
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a namedtuple
        return type(first)(*[_map(fn, caller, *items) for items in zip(*trees)])
    if isinstance(first, (list, tuple)):
        return type(first)([_map(fn, caller, *items) for items in zip(*trees)])
    return fn(*trees)


def _host_mask(mask: Tensor, mask_cpu: Optional[Tensor]) -> Tensor:
    """The mask on the host, for new lengths: mask_cpu when given, else a copy (waits for the device).
    While tracing the mask itself: new lengths are computed in the graph."""
    if mask_cpu is not None:
        return mask_cpu
    if _tracing.tracing():
        return mask
    return Tensor(to_host(mask.raw), mask.dims)


def _sizes_of(dim: Dim) -> Tensor:
    """A dim's lengths, or its static size as a 0-dim int64 host Tensor."""
    if dim.lengths is not None:
        return dim.lengths
    return Tensor(torch.full((), dim.size, dtype=torch.int64), ())


def _with_dim(t: Tensor, dim: Dim) -> Tensor:
    """t broadcast over `dim` (put first) when it lacks it; a view."""
    if dim in t.dims:
        return t
    n = _sizes.padded_size(dim, "dimtorch.masked_scatter_nested()")
    return Tensor(t.raw.unsqueeze(0).expand((n,) + tuple(t.raw.shape)), (dim,) + t.dims,
                  sparse_dim=t.sparse_dim, feature_dim=t.feature_dim)


@names_errors("dimtorch.masked_select_nested()")
def masked_select_nested(s, *, mask: Tensor, mask_cpu: Optional[Tensor] = None, dims: Sequence[Dim],
                         out_dim: Optional[Dim] = None, dim_map: Optional[Dict[Dim, Dim]] = None):
    """masked_select over every Tensor of the tree `s` that has one of `dims` (the others, and None,
    stay as they are); returns (s, out_dim, dim_map). A dynamic dim whose lengths vary over `dims`
    (e.g. the history length of each hypothesis) gets a new dim whose lengths are its lengths
    masked_select'ed too (over out_dim): dim_map maps it there (and is updated when given), Dim leaves
    and the tensors' dims alike.

    New lengths live on the host, so they come from `mask_cpu` (the mask on the CPU) when given, else
    from a copy of the mask (one wait for the device); out_dim, made from that host mask when not
    given, is the same for every tensor."""
    caller = "dimtorch.masked_select_nested()"
    dims = dims_arg(dims, caller, "dims")
    check_tensor(mask, caller, "mask")
    if mask_cpu is not None:
        check_tensor(mask_cpu, caller, "mask_cpu")
    if out_dim is not None and not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    if dim_map is not None:
        check_dim_map(dim_map, caller, "dim_map")
    host_mask = _host_mask(mask, mask_cpu)
    if out_dim is None:
        out_dim = _new_out_dim(host_mask, dims, caller)
    dim_map = {} if dim_map is None else dim_map

    def map_dim(d: Dim) -> Dim:
        if d in dim_map or d.lengths is None or not any(b in dims for b in d.lengths.dims):
            return dim_map.get(d, d)
        lengths, _ = masked_select(d.lengths, mask=host_mask, dims=dims, out_dim=out_dim)
        dim_map[d] = Dim(lengths, name=d.name)
        if _tracing.tracing():  # (its padded size: the one it had; no size read from data)
            _sizes.bind(dim_map[d], _sizes.padded_size(d, caller))
        return dim_map[d]

    def select(x):
        if isinstance(x, Dim):
            return map_dim(x)
        if x is None:
            return None
        if not isinstance(x, Tensor):
            raise TypeError(f"{caller}: leaves must be Tensors, Dims or None, got {type(x).__name__}")
        if not any(d in x.dims for d in dims):
            return x
        for d in x.dims:
            map_dim(d)
        use = mask_cpu if mask_cpu is not None and x.raw.device.type == "cpu" else mask
        out, _ = masked_select(x, mask=use, dims=dims, out_dim=out_dim)
        for d in out.dims:
            if d in dim_map:
                out = replace_dim_v2(out, in_dim=d, out_dim=dim_map[d], allow_expand=False)
        return out

    return _map(select, caller, s), out_dim, dim_map


def _new_out_dim(host_mask: Tensor, dims: tuple, caller: str) -> Dim:
    """The out dim masked_select would make for this mask (counts from the host mask)."""
    sel = _Selection(host_mask, dims, caller)
    counts = sel.counts()
    if _tracing.tracing():  # the counts as lengths, the padded size bounded (masked_select's traced form)
        out_dim = Dim(Tensor(counts, sel.other), name="masked_select")
        _sizes.bind(out_dim, sel.n_flat)
        return out_dim
    if not sel.other:
        return Dim(int(counts), name="masked_select")
    return Dim(Tensor(counts, sel.other), name="masked_select")


@names_errors("dimtorch.masked_scatter_nested()")
def masked_scatter_nested(s, backup, *, mask: Tensor, mask_cpu: Optional[Tensor] = None, dims: Sequence[Dim],
                          in_dim: Dim, masked_select_dim_map: Dict[Dim, Dim],
                          masked_scatter_dim_map: Optional[Dict[Dim, Dim]] = None):
    """The inverse of masked_select_nested: each Tensor of `s` (packed over in_dim) masked_scatter'ed
    into the Tensor at the same place of `backup`; returns the tree. A dim that masked_select_nested
    mapped (masked_select_dim_map) and whose backup dim is another one is merged: a new dim whose
    lengths are the packed lengths where the mask holds and the backup's elsewhere (recorded in
    masked_scatter_dim_map); both tensors are padded or cut to it (replace_dim_v2). Lengths are
    computed on the host, from `mask_cpu` when given (else a copy of the mask)."""
    caller = "dimtorch.masked_scatter_nested()"
    dims = dims_arg(dims, caller, "dims")
    if not isinstance(in_dim, Dim):
        raise TypeError(f"{caller}: in_dim must be a Dim, got {type(in_dim).__name__}")
    check_tensor(mask, caller, "mask")
    if mask_cpu is not None:
        check_tensor(mask_cpu, caller, "mask_cpu")
    check_dim_map(masked_select_dim_map, caller, "masked_select_dim_map")
    if masked_scatter_dim_map is not None:
        check_dim_map(masked_scatter_dim_map, caller, "masked_scatter_dim_map")
    host_mask = _host_mask(mask, mask_cpu)
    reverse = {new: old for old, new in masked_select_dim_map.items()}
    merged = {} if masked_scatter_dim_map is None else masked_scatter_dim_map

    def merge(sd, bd):
        if not isinstance(sd, Dim):
            return
        if not isinstance(bd, Dim):
            raise TypeError(f"{caller}: s has the Dim {dim_str(sd)} where backup has {type(bd).__name__}")
        orig = reverse.get(sd, sd)
        if orig is bd:
            return
        if orig in merged:
            if bd not in merged:
                raise ValueError(f"{caller}: the dim {dim_str(orig)} meets two backup dims ({dim_str(bd)})")
            return
        if bd in merged:
            raise ValueError(f"{caller}: the backup dim {dim_str(bd)} meets two dims of s ({dim_str(sd)})")
        source = _with_dim(_sizes_of(sd), in_dim)
        lengths = masked_scatter(source, _sizes_of(bd), mask=host_mask, dims=dims, in_dim=in_dim)
        new = Dim(lengths, name=bd.name)
        if _tracing.tracing():  # (its padded size: the larger of the two; no size read from data)
            _sizes.bind(new, torch.sym_max(_sizes.padded_size(sd, caller), _sizes.padded_size(bd, caller)))
        merged[orig] = merged[sd] = merged[bd] = new

    def scatter(st, bt):
        if isinstance(st, Dim):
            d = reverse.get(st, st)
            return merged.get(d, d)
        if st is None:
            if bt is not None:
                raise ValueError(f"{caller}: s has None where backup has {type(bt).__name__}")
            return None
        if not isinstance(st, Tensor) or not isinstance(bt, Tensor):
            raise TypeError(f"{caller}: leaves must be Tensors, Dims or None, got {type(st).__name__} and "
                            f"{type(bt).__name__}")
        st = _with_dim(st, in_dim)
        for d in st.dims:
            if d in merged:
                st = replace_dim_v2(st, in_dim=d, out_dim=merged[d])
            elif d in reverse:
                st = replace_dim_v2(st, in_dim=d, out_dim=reverse[d], allow_shrink=False)
        for d in bt.dims:
            if d in merged:
                bt = replace_dim_v2(bt, in_dim=d, out_dim=merged[d])
        return masked_scatter(st, bt, mask=mask, dims=dims, in_dim=in_dim)

    _map(merge, caller, s, backup)
    return _map(scatter, caller, s, backup)
