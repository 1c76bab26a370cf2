"""Ops on nested structures of Tensors (RETURNN frontend's rf.nested): gather_nested, where_nested, mask_nested.

Beam search keeps its decoder state as a nested structure (tuples, lists, dicts, named tuples, registered
pytree nodes) and reorders or merges it per hypothesis with these.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
import torch.utils._pytree as pytree

from .._C import Dim, Tensor, gather, where
from .._core.data_dependent import to_host
from .._core.args import check_tensor, dim_str, dims_str
from ._support import check_dim_map, names_errors


def _is_leaf(v) -> bool:
    return isinstance(v, (Tensor, Dim))


def _leaves(tree) -> list:
    """The leaves of a structure in order: plain tuples, lists and dicts walked directly (a beam-search
    step calls these every step; torch's pytree costs more than the ops), other nodes by pytree."""
    t = type(tree)
    if t is tuple or t is list:
        return [leaf for item in tree for leaf in _leaves(item)]
    if t is dict:
        return [leaf for key in tree for leaf in _leaves(tree[key])]
    if t is Tensor or t is Dim or tree is None or t in (bool, int, float, str):
        return [tree]
    return pytree.tree_flatten(tree, is_leaf=_is_leaf)[0]


def _rebuild(tree, leaves: list, at: list):
    """tree's structure with its leaves taken from `leaves` (at[0]: the next one)."""
    t = type(tree)
    if t is tuple or t is list:
        return t(_rebuild(item, leaves, at) for item in tree)
    if t is dict:
        return {key: _rebuild(tree[key], leaves, at) for key in tree}
    if t is Tensor or t is Dim or tree is None or t in (bool, int, float, str):
        at[0] += 1
        return leaves[at[0] - 1]
    flat, spec = pytree.tree_flatten(tree, is_leaf=_is_leaf)
    at[0] += len(flat)
    return pytree.tree_unflatten(leaves[at[0] - len(flat):at[0]], spec)


def _structure(tree):
    """A comparable description of tree's structure (containers, keys, pytree specs), leaves left out."""
    t = type(tree)
    if t is tuple or t is list:
        return t, tuple(_structure(item) for item in tree)
    if t is dict:
        return dict, tuple((key, _structure(tree[key])) for key in tree)
    if t is Tensor or t is Dim or tree is None or t in (bool, int, float, str):
        return None
    return pytree.tree_flatten(tree, is_leaf=_is_leaf)[1]


def _replace_dims(t: Tensor, dim_map: Dict[Dim, Dim]) -> Tensor:
    if not any(d in dim_map for d in t.dims):
        return t
    dims = tuple(dim_map.get(d, d) for d in t.dims)
    return Tensor(t.raw, dims, sparse_dim=dim_map.get(t.sparse_dim, t.sparse_dim),
                  feature_dim=dim_map.get(t.feature_dim, t.feature_dim))


@names_errors("dimtorch.gather_nested()")
def gather_nested(s: Any, *, indices: Tensor, dim_map: Optional[Dict[Dim, Dim]] = None) -> Any:
    """s with every Tensor that has indices.sparse_dim gathered along it (dt.gather); others as they
    are. A dim of s whose lengths vary over indices.sparse_dim (e.g. a per-hypothesis history) gets a
    new dim with the gathered lengths, and the Tensors over it use that dim; `dim_map` (updated)
    maps old dims to new ones. Gathering lengths reads the indices from the device (they are kept on
    the host); without such dims there are no device reads."""
    caller = "dimtorch.gather_nested()"
    check_tensor(indices, caller, what="indices")
    axis = indices.sparse_dim
    if axis is None:
        raise ValueError(f"{caller}: indices need a sparse_dim (the dim to gather along), got dims "
                         f"({dims_str(indices.dims)})")
    if dim_map is not None:
        check_dim_map(dim_map, caller)
    dim_map = {} if dim_map is None else dim_map
    leaves = _leaves(s)
    host_indices = None
    for leaf in leaves:
        dims = leaf.dims if isinstance(leaf, Tensor) else (leaf,) if isinstance(leaf, Dim) else ()
        for d in dims:
            if d.lengths is None or d in dim_map or axis not in d.lengths.dims:
                continue
            if host_indices is None:
                host_indices = Tensor(to_host(indices.raw), indices.dims, sparse_dim=axis)  # a device read
            dim_map[d] = Dim(gather(d.lengths, indices=host_indices, axis=axis), name=f"{d.name}_gathered")
    out = []
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            if axis in leaf.dims:
                leaf = gather(leaf, indices=indices, axis=axis)
            out.append(_replace_dims(leaf, dim_map))
        elif isinstance(leaf, Dim):
            out.append(dim_map.get(leaf, leaf))
        else:
            out.append(leaf)
    return _rebuild(s, out, [0])


def _pairs(x, y, caller: str):
    if _structure(x) != _structure(y):
        raise ValueError(f"{caller}: the two structures differ: {_structure(x)} vs {_structure(y)}")
    return _leaves(x), _leaves(y)


def _same_dim(a: Dim, b: Dim, caller: str) -> Dim:
    if a is not b:
        raise ValueError(f"{caller}: merging two different dims ({dim_str(a)}, {dim_str(b)}) of the structures is not "
                         f"supported yet")
    return a


@names_errors("dimtorch.where_nested()")
def where_nested(x: Any, y: Any, *, condition: Tensor, condition_cpu: Optional[Tensor] = None) -> Any:
    """where(condition, x_leaf, y_leaf) for each pair of Tensors of two structures alike (broadcast
    as dt.combine(allow_broadcast_all_sources=True)); equal non-Tensor leaves stay. Dims of the
    structures must be the same dim on both sides (merging two dims: not yet). condition_cpu is
    accepted for RETURNN frontend's signature (lengths are on the host already)."""
    caller = "dimtorch.where_nested()"
    check_tensor(condition, caller, what="condition")
    tx = type(x)
    if (tx is tuple or tx is list) and type(y) is tx and len(x) == len(y) and \
            all(type(a) is Tensor and type(b) is Tensor for a, b in zip(x, y)):
        return tx(_where_all(condition, a, b) for a, b in zip(x, y))  # the common flat state
    x_leaves, y_leaves = _pairs(x, y, caller)
    out = []
    for a, b in zip(x_leaves, y_leaves):
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            out.append(_where_all(condition, a, b))
        elif isinstance(a, Dim):
            out.append(_same_dim(a, b, caller))
        else:
            out.append(a)
    return _rebuild(x, out, [0])


def _where_all(condition: Tensor, a, b) -> Tensor:
    """where(condition, a, b), broadcast as needed: dt.where (one torch call) when an operand holds all
    dims (it refuses an outer broadcast), else all dims aligned by hand."""
    try:
        return where(condition, a, b)
    except ValueError:
        return _where_broadcast(condition, a, b)


def _where_broadcast(condition: Tensor, a, b) -> Tensor:
    dims = list(condition.dims)
    for t in (a, b):
        if isinstance(t, Tensor):
            dims += [d for d in t.dims if d not in dims]
    raws = []
    for t in (condition, a, b):
        raws.append(t.raw_aligned(tuple(dims)) if isinstance(t, Tensor) else t)
    return Tensor(torch.where(*raws), tuple(dims))


@names_errors("dimtorch.mask_nested()")
def mask_nested(s: Any, *, mask: Tensor, mask_cpu: Optional[Tensor] = None, mask_value: Any,
                dim_map: Optional[Dict[Dim, Dim]] = None, allow_dim_extension: bool = True) -> Any:
    """where(mask, s_leaf, mask_value leaf) over a structure (RETURNN frontend's rules): mask_value
    is a structure like s, or one value (number, Tensor or None = 0) for every leaf.

    Tensors: with allow_dim_extension (default) and a mask value other than None or 0, the leaf is
    broadcast over the mask's dims (and the value's); otherwise a leaf is masked only when it has
    all of the mask's dims (and, without allow_dim_extension, all of its mask value's), and a leaf
    with none of the mask's dims is left as it is.

    Dims: a dim of s paired with a different dim of mask_value (e.g. a history grown by one label
    for some hypotheses only) merge into a new dim with lengths where(mask, s's, mask_value's),
    computed on the host (from mask_cpu, else the mask READ FROM THE DEVICE); both map to it in
    `dim_map` (updated), and every Tensor over either is moved onto it (replace_dim_v2: frames past
    a sequence's old length are 0) before the where. Without allow_dim_extension, two dims whose
    lengths vary over none of the mask's dims stay as s has them."""
    caller = "dimtorch.mask_nested()"
    check_tensor(mask, caller, what="mask")
    if mask_cpu is not None:
        check_tensor(mask_cpu, caller, what="mask_cpu")
    if dim_map is not None:
        check_dim_map(dim_map, caller)
    dim_map = {} if dim_map is None else dim_map
    leaves = _leaves(s)
    if type(mask_value) is type(s) and not isinstance(s, (Tensor, Dim)):
        if _structure(mask_value) != _structure(s):
            raise ValueError(f"{caller}: mask_value's structure differs from s's: {_structure(mask_value)} vs "
                             f"{_structure(s)}")
        values_leaves = _leaves(mask_value)
    else:
        values_leaves = [mask_value] * len(leaves)
    for leaf, value in zip(leaves, values_leaves):  # first the merged dims, for the Tensors over them
        if isinstance(leaf, Dim) and isinstance(value, Dim) and leaf is not value and leaf not in dim_map:
            merged = _merged_dim(leaf, value, mask, mask_cpu, allow_dim_extension, caller)
            if merged is not None:
                dim_map[leaf] = dim_map[value] = merged
    out = []
    for leaf, value in zip(leaves, values_leaves):
        if isinstance(leaf, Tensor):
            if dim_map:
                leaf = _onto_merged_dims(leaf, dim_map)
                if isinstance(value, Tensor):
                    value = _onto_merged_dims(value, dim_map)
            out.append(_mask_leaf(leaf, value, mask, allow_dim_extension, caller))
        elif isinstance(leaf, Dim):
            if value is None or not isinstance(value, Dim) or value is leaf:
                out.append(leaf)
            else:
                out.append(dim_map.get(leaf, leaf))
        else:
            out.append(leaf)
    return _rebuild(s, out, [0])


def _merged_dim(a: Dim, b: Dim, mask: Tensor, mask_cpu: Optional[Tensor], allow_dim_extension: bool,
                caller: str) -> Optional[Dim]:
    """The dim with lengths where(mask, a's, b's) (host), or None where a stays (without
    allow_dim_extension: lengths over none of the mask's dims)."""
    sizes = []
    for d in (a, b):
        if d.lengths is not None:
            sizes.append(d.lengths)
        elif d.size is not None:
            sizes.append(d.size)
        else:
            raise ValueError(f"{caller}: cannot merge {dim_str(d)}, which takes its size from data")
    if not allow_dim_extension:
        over = {id(e) for t in sizes if isinstance(t, Tensor) for e in t.dims}
        if not any(id(e) in over for e in mask.dims):
            return None
    host_mask = mask_cpu if mask_cpu is not None else mask
    if host_mask.raw.device.type != "cpu":
        host_mask = Tensor(to_host(host_mask.raw), host_mask.dims)  # a device read: the lengths live on the host
    lengths = _where_all(host_mask, *sizes)
    if not isinstance(lengths, Tensor) or not lengths.dims:
        return Dim(int(lengths.raw) if isinstance(lengths, Tensor) else int(lengths), name=_merged_name(a))
    return Dim(Tensor(lengths.raw.to(torch.int64), lengths.dims), name=_merged_name(a))


def _merged_name(d: Dim) -> str:
    name = d.name or "dim"
    return name if name.endswith("_masked") else f"{name}_masked"


def _onto_merged_dims(t: Tensor, dim_map: Dict[Dim, Dim]) -> Tensor:
    from .reshape import replace_dim_v2  # (reshape imports shape, which imports nothing of here)
    for d in t.dims:
        new = dim_map.get(d)
        if new is not None and new is not d and new not in t.dims:
            t = replace_dim_v2(t, in_dim=d, out_dim=new)
    return t


def _mask_leaf(leaf: Tensor, value, mask: Tensor, allow_dim_extension: bool, caller: str) -> Tensor:
    zero = value is None or (isinstance(value, (int, float)) and value == 0)
    value = 0 if value is None else value
    if not allow_dim_extension and isinstance(value, Tensor) and not all(d in leaf.dims for d in value.dims):
        return leaf
    if not allow_dim_extension or zero:
        inside = [d in leaf.dims for d in mask.dims]
        if not any(inside):
            return leaf
        if not all(inside):
            raise ValueError(f"{caller}: a Tensor over ({dims_str(leaf.dims)}) has some but not all of the mask's dims "
                             f"({dims_str(mask.dims)})")
        if isinstance(value, Tensor):
            return _where_all(mask, leaf, value)
        return where(mask, leaf, value)
    return _where_all(mask, leaf, value)


__all__ = ["gather_nested", "where_nested", "mask_nested"]
