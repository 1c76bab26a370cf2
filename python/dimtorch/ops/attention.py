"""Dot-product attention over a named axis (dt.dot_attention, RETURNN frontend's): F.scaled_dot_product_attention."""
from __future__ import annotations

import weakref
from typing import Optional

import torch
import torch.nn.functional as F

from .. import _C
from .._C import Dim, Tensor
from .._core import dim_cache as _dim_cache
from .._core.args import check_tensor, dim_str, dims_str
from ._support import names_errors

_MASK = 0  # kind of dimtorch._C._dim_cached_raw (src/core/mask.h)
_CAUSAL: dict = {}  # (Lq, S, device) -> bool tril raw
_PLANS: dict = {}  # call signature (dim ids) -> _Plan; a plan goes when one of its dims dies
_MAX_PLANS = 64


def _has(dims: tuple, d: Dim) -> bool:
    return any(e is d for e in dims)


def _causal(lq: int, s: int, device) -> torch.Tensor:
    key = (lq, s, device)
    m = _CAUSAL.get(key)
    if m is None:
        if len(_CAUSAL) > 64:
            _CAUSAL.clear()
        m = _CAUSAL[key] = torch.ones(lq, s, dtype=torch.bool, device=device).tril()
    return m


class _Plan:
    """What one call signature of dot_attention derives from the dims alone (checks, classes of dims,
    raw orders, mask layouts), made once: a model calls attention with the same dims call after call.
    /* The Python analysis of the dims costs more than SDPA itself on tiny shapes. */
    It holds no Dim (the cache would keep them alive): orders are recipes of (source, index), source
    0/1/2 the dims of query/keys/values, 3 key_dim, 4 axis; `*_as_is` says a raw is in order."""

    __slots__ = ("refs", "q_order", "k_order", "v_order", "q_as_is", "k_as_is", "v_as_is", "nb", "nq", "nv",
                 "q_masks", "key_mask", "is_causal", "causal_tril", "out_dims", "feature_dim")


def _recipe(order: tuple, sources: tuple) -> tuple:
    """(source, index) per dim of order: the first source among `sources` (dims tuples) holding it."""
    out = []
    for d in order:
        out.append(next((s, i) for s, dims in enumerate(sources) for i, e in enumerate(dims) if e is d))
    return tuple(out)


def _dims_of(recipe: tuple, sources: tuple) -> tuple:
    return tuple(sources[s][i] for s, i in recipe)


def _check_args(caller: str, query, keys, values, key_dim, axis, causal) -> None:
    check_tensor(query, caller, what="query")
    check_tensor(keys, caller, what="keys")
    check_tensor(values, caller, what="values")
    for name, d in (("key_dim", key_dim), ("axis", axis)):
        if not isinstance(d, Dim):
            raise TypeError(f"{caller}: {name} must be a Dim, got {type(d).__name__}")
    for name, t, d, what in (("query", query, key_dim, "key_dim"), ("keys", keys, key_dim, "key_dim"),
                             ("keys", keys, axis, "axis"), ("values", values, axis, "axis")):
        if not _has(t.dims, d):
            raise ValueError(f"{caller}: {what} {dim_str(d)} is not a dim of {name} (dims: {dims_str(t.dims)})")
    if key_dim is axis:
        raise ValueError(f"{caller}: key_dim and axis are the same dim {dim_str(axis)}")
    if causal is not None:
        if not isinstance(causal, Dim):
            raise TypeError(f"{caller}: causal_query_spatial_dim must be a Dim, got {type(causal).__name__}")
        if not _has(query.dims, causal):
            raise ValueError(f"{caller}: causal_query_spatial_dim {dim_str(causal)} is not a dim of query "
                             f"(dims: {dims_str(query.dims)})")
        if causal is not axis and causal.size != axis.size:
            raise ValueError(f"{caller}: causal_query_spatial_dim {dim_str(causal)} and axis {dim_str(axis)} "
                             f"must have the same size")


def _positions(d: Dim, order: tuple) -> Optional[tuple]:
    """Axes in `order` of d's lengths dims, then of d (src/core/mask.h's layout), or None when order
    lacks a lengths dim (every frame then counts as valid)."""
    pos = []
    for b in d.lengths.dims:
        if not _has(order, b):
            return None
        pos.append(next(i for i, e in enumerate(order) if e is b))
    return tuple(pos) + (next(i for i, e in enumerate(order) if e is d),)


def _make_plan(caller: str, query: Tensor, keys: Tensor, values: Tensor, key_dim: Dim, axis: Dim,
               causal: Optional[Dim]) -> _Plan:
    _check_args(caller, query, keys, values, key_dim, axis, causal)
    kv_dims = keys.dims + values.dims
    q_spatial = tuple(d for d in query.dims if d is not key_dim and (not _has(kv_dims, d) or d is axis))
    v_feat = tuple(d for d in values.dims
                   if d is not axis and (d is key_dim or not (_has(query.dims, d) or _has(keys.dims, d))))
    batch = []
    for d in query.dims + keys.dims + values.dims:
        if d is key_dim or d is axis or _has(q_spatial, d) or _has(v_feat, d) or _has(tuple(batch), d):
            continue
        batch.append(d)
    batch = tuple(batch)
    if causal is not None and q_spatial != (causal,):
        raise ValueError(f"{caller}: with causal_query_spatial_dim {dim_str(causal)}, it must be the query's only "
                         f"dim besides key_dim and the batch dims; query-only dims are ({dims_str(q_spatial)})")
    plan = _Plan()
    sources = (query.dims, keys.dims, values.dims, (key_dim,), (axis,))
    plan.nb, plan.nq, plan.nv = len(batch), len(q_spatial), len(v_feat)
    q_order, k_order = batch + q_spatial + (key_dim,), batch + (axis, key_dim)
    v_order = batch + (axis,) + v_feat
    plan.q_as_is, plan.k_as_is, plan.v_as_is = query.dims == q_order, keys.dims == k_order, values.dims == v_order
    plan.q_order, plan.k_order = _recipe(q_order, sources), _recipe(k_order, sources)
    plan.v_order, plan.out_dims = _recipe(v_order, sources), _recipe(batch + q_spatial + v_feat, sources)
    # Queries at the padding of their dynamic dims are zeroed: a NaN query row makes NaN weights,
    # whose gradient (0 * NaN) would reach the keys and values of valid frames.
    q_masks = []
    for d in q_spatial:
        if d.lengths is not None:
            pos = _positions(d, batch + q_spatial)
            if pos is not None:
                i = query.dims.index(d)
                q_masks.append((i, pos, len(batch + q_spatial)))
    plan.q_masks = tuple(q_masks)
    plan.key_mask = None
    if axis.lengths is not None:
        pos = _positions(axis, batch + (axis,))
        if pos is None:
            missing = [d for d in axis.lengths.dims if not _has(batch, d)]
            raise ValueError(f"{caller}: the lengths of axis {dim_str(axis)} vary over ({dims_str(missing)}), "
                             f"which the inputs lack")
        plan.key_mask = pos
    plan.is_causal = causal is axis
    plan.causal_tril = causal is not None and causal is not axis
    plan.feature_dim = _has(v_feat, values.feature_dim)  # whether the result keeps values' feature_dim
    return plan


def _forget(dim: Dim) -> None:
    """Drops the plans made with `dim` (whether it has lengths decides the key mask: new lengths bound
    to it)."""
    for key, plan in list(_PLANS.items()):
        if any(r() is dim for r in plan.refs):
            _PLANS.pop(key, None)


_dim_cache.on_forget(_forget)


def _plan(caller: str, query, keys, values, key_dim, axis, causal) -> _Plan:
    if type(query) is not Tensor or type(keys) is not Tensor or type(values) is not Tensor:
        return _make_plan(caller, query, keys, values, key_dim, axis, causal)
    key = (id(key_dim), id(axis), id(causal), id(values.feature_dim), *map(id, query.dims), None,
           *map(id, keys.dims), None, *map(id, values.dims))
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    plan = _make_plan(caller, query, keys, values, key_dim, axis, causal)

    def forget(ref, key=key):
        entry = _PLANS.get(key)
        if entry is not None and any(r is ref for r in entry.refs):
            del _PLANS[key]

    dims = {id(d): d for d in query.dims + keys.dims + values.dims + (key_dim, axis)}
    for extra in (causal, values.feature_dim):
        if extra is not None:
            dims[id(extra)] = extra
    plan.refs = tuple(weakref.ref(d, forget) for d in dims.values())
    if len(_PLANS) >= _MAX_PLANS:
        del _PLANS[next(iter(_PLANS))]
    _PLANS[key] = plan
    return plan


@names_errors("dimtorch.dot_attention()")
def dot_attention(query: Tensor, keys: Tensor, values: Tensor, *, key_dim: Dim, axis: Dim, att_dropout: float = 0.0,
                  att_dropout_broadcast: Optional[bool] = None, causal_query_spatial_dim: Optional[Dim] = None,
                  scale: Optional[float] = None, training: bool = True) -> Tensor:
    """softmax over `axis` of (query . keys over `key_dim`) * scale, then the weighted sum of
    `values` over `axis` (multi-head when the inputs share a heads dim). Returns a Tensor over the
    batch dims (dims shared by the inputs other than key_dim and axis), the query's own dims, and
    the values' own dims (`key_dim` counts as one of the values' own dims when values have it).

    - `axis` (in keys and values) is the attended positions; with lengths, keys beyond each
      sequence's length are masked. Keys and values there, and queries at the padding frames of
      dynamic query dims, are zeroed first, so NaN/inf garbage in padding reaches no valid output
      and no valid gradient (a sequence without keys gives 0).
    - `axis` also in the query means self-attention: each query position attends over all key
      positions (RETURNN frontend semantics).
    - `causal_query_spatial_dim`: query position i attends to key positions <= i; it is `axis`
      itself (causal self-attention, SDPA's is_causal) or a query dim of the same size.
    - scale: default key_dim's size ** -0.5. att_dropout: on the attention weights, only when
      `training`; `att_dropout_broadcast=True` draws one mask over `axis`, shared by all other dims.
    One F.scaled_dot_product_attention call (a manual softmax path for a broadcast dropout); the
    dims analysis is made once per call signature."""
    caller = "dimtorch.dot_attention()"
    plan = _plan(caller, query, keys, values, key_dim, axis, causal_query_spatial_dim)
    is_number = type(att_dropout) is float or (isinstance(att_dropout, (int, float)) and not isinstance(att_dropout, bool))
    if not is_number or not 0.0 <= att_dropout <= 1.0:
        raise ValueError(f"{caller}: att_dropout must be a float in [0, 1], got {att_dropout!r}")
    if isinstance(training, (Tensor, torch.Tensor)):
        raise TypeError(f"{caller}: training must be a bool, got a {type(training).__name__}")
    sources = (query.dims, keys.dims, values.dims, (key_dim,), (axis,))
    q = query.raw if plan.q_as_is else query.raw_aligned(_dims_of(plan.q_order, sources))
    k = keys.raw if plan.k_as_is else keys.raw_aligned(_dims_of(plan.k_order, sources))
    v = values.raw if plan.v_as_is else values.raw_aligned(_dims_of(plan.v_order, sources))
    device = k.device
    valid = None
    for i, pos, ndim in plan.q_masks:
        m = _C._dim_cached_raw(_MASK, query.dims[i], pos, ndim, query.raw.shape[i], device)
        valid = m if valid is None else valid & m
    if valid is not None:
        q = torch.where(valid[..., None], q, 0.0)
    nb, nq, nv = plan.nb, plan.nq, plan.nv
    q_shape = q.shape[nb:nb + nq]
    if nq != 1:
        q = q.unsqueeze(nb) if nq == 0 else q.flatten(nb, nb + nq - 1)
    v_shape = v.shape[nb + 1:]
    if nv != 1:
        v = v.unsqueeze(-1) if nv == 0 else v.flatten(nb + 1)
    mask = None
    if plan.key_mask is not None:
        key_valid = _C._dim_cached_raw(_MASK, axis, plan.key_mask, nb + 1, k.shape[-2], device)
        kv_valid = key_valid[..., None]
        k = torch.where(kv_valid, k, 0.0)
        v = torch.where(kv_valid, v, 0.0)
        if not plan.is_causal:  # causal self-attention: a valid frame sees no frame past its own
            mask = key_valid[..., None, :]
    if plan.is_causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"{caller}: causal self-attention needs the query's and the keys' raw sizes of "
                         f"{dim_str(axis)} to agree, got {q.shape[-2]} and {k.shape[-2]}")
    if plan.causal_tril:
        tril = _causal(q.shape[-2], k.shape[-2], device)
        mask = tril if mask is None else mask & tril
    p = float(att_dropout) if training else 0.0
    if p and att_dropout_broadcast:
        out = _broadcast_dropout_attention(q, k, v, mask, plan.is_causal, scale, p)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=plan.is_causal,
                                             scale=scale)
    if nq != 1 or nv != 1:
        out = out.reshape(tuple(out.shape[:nb]) + tuple(q_shape) + tuple(v_shape))
    return Tensor(out, _dims_of(plan.out_dims, sources), feature_dim=values.feature_dim if plan.feature_dim else None)


def _broadcast_dropout_attention(q, k, v, mask, is_causal, scale, p):
    """Attention with one dropout mask over the key positions, shared by all other dims."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    energies = torch.matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:
        mask = _causal(q.shape[-2], k.shape[-2], q.device)
    if mask is not None:
        # A finite fill keeps a sequence without keys finite (its zeroed values give 0).
        energies = torch.where(mask, energies, torch.finfo(energies.dtype).min)
    weights = torch.softmax(energies, dim=-1)
    keep = weights.new_empty(k.shape[-2]).bernoulli_(1.0 - p) / (1.0 - p) if p < 1 else weights.new_zeros(k.shape[-2])
    return torch.matmul(weights * keep, v)


__all__ = ["dot_attention"]
