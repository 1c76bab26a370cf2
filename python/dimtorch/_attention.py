"""Dot-product attention over a named axis (dt.dot_attention, RETURNN frontend's): F.scaled_dot_product_attention."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ._C import Dim, Tensor
from ._mask import get_mask
from ._shape_ops import check_tensor, dim_str, dims_str

_CAUSAL: dict = {}  # (Lq, S, device) -> bool tril raw


def _has(dims: tuple, d: Dim) -> bool:
    return any(e is d for e in dims)


def _aligned(x: Tensor, order: tuple) -> torch.Tensor:
    return x.raw if x.dims == order else x.raw_aligned(order)


def _merged(raw: torch.Tensor, n_lead: int, n: int) -> torch.Tensor:
    """raw (*lead, *n axes, rest) with the n axes after lead as one axis (a new size-1 axis for n = 0)."""
    if n == 1:
        return raw
    if n == 0:
        return raw.unsqueeze(n_lead)
    return raw.flatten(n_lead, n_lead + n - 1)


def _causal(lq: int, s: int, device) -> torch.Tensor:
    key = (lq, s, device)
    m = _CAUSAL.get(key)
    if m is None:
        if len(_CAUSAL) > 64:
            _CAUSAL.clear()
        m = _CAUSAL[key] = torch.ones(lq, s, dtype=torch.bool, device=device).tril()
    return m


def _classify(caller: str, query: Tensor, keys: Tensor, values: Tensor, key_dim: Dim, axis: Dim,
              causal: Optional[Dim]) -> tuple:
    """(batch dims, query dims, value feature dims) of an attention call (see dot_attention)."""
    kv_dims = keys.dims + values.dims
    q_spatial = tuple(d for d in query.dims if d is not key_dim and (not _has(kv_dims, d) or d is axis))
    v_feat = tuple(d for d in values.dims
                   if d is not axis and (d is key_dim or not (_has(query.dims, d) or _has(keys.dims, d))))
    batch = []
    for d in query.dims + keys.dims + values.dims:
        if d is key_dim or d is axis or _has(q_spatial, d) or _has(v_feat, d) or _has(tuple(batch), d):
            continue
        batch.append(d)
    if causal is not None and q_spatial != (causal,):
        raise ValueError(f"{caller}: with causal_query_spatial_dim {dim_str(causal)}, it must be the query's only "
                         f"dim besides key_dim and the batch dims; query-only dims are ({dims_str(q_spatial)})")
    return tuple(batch), q_spatial, v_feat


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
    One F.scaled_dot_product_attention call (a manual softmax path for a broadcast dropout)."""
    caller = "dimtorch.dot_attention()"
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
    if isinstance(att_dropout, bool) or not isinstance(att_dropout, (int, float)) or not 0.0 <= att_dropout <= 1.0:
        raise ValueError(f"{caller}: att_dropout must be a float in [0, 1], got {att_dropout!r}")
    if isinstance(training, (Tensor, torch.Tensor)):
        raise TypeError(f"{caller}: training must be a bool, got a {type(training).__name__}")
    causal = causal_query_spatial_dim
    if causal is not None:
        if not isinstance(causal, Dim):
            raise TypeError(f"{caller}: causal_query_spatial_dim must be a Dim, got {type(causal).__name__}")
        if not _has(query.dims, causal):
            raise ValueError(f"{caller}: causal_query_spatial_dim {dim_str(causal)} is not a dim of query "
                             f"(dims: {dims_str(query.dims)})")
        if causal is not axis and causal.size != axis.size:
            raise ValueError(f"{caller}: causal_query_spatial_dim {dim_str(causal)} and axis {dim_str(axis)} "
                             f"must have the same size")
    batch, q_spatial, v_feat = _classify(caller, query, keys, values, key_dim, axis, causal)
    nb = len(batch)
    q_order = batch + q_spatial + (key_dim,)
    q = _zero_query_padding(caller, _aligned(query, q_order), q_order, batch, q_spatial)
    q = _merged(q, nb, len(q_spatial))
    k = _aligned(keys, batch + (axis, key_dim))
    v = _merged(_aligned(values, batch + (axis,) + v_feat), nb + 1, len(v_feat))
    if causal is axis and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"{caller}: causal self-attention needs the query's and the keys' raw sizes of "
                         f"{dim_str(axis)} to agree, got {q.shape[-2]} and {k.shape[-2]}")
    valid = None  # bool (*batch, S), size 1 for batch dims the lengths do not vary over
    if axis.dyn_size is not None:
        missing = [d for d in axis.dyn_size.dims if not _has(batch, d)]
        if missing:
            raise ValueError(f"{caller}: the lengths of axis {dim_str(axis)} vary over ({dims_str(missing)}), "
                             f"which the inputs lack")
        order = batch + (axis,)
        m = get_mask(axis, dims_order=order, device=k.device)
        valid = _aligned(m, order)
        k = torch.where(valid[..., None], k, 0.0)
        v = torch.where(valid[..., None], v, 0.0)
    mask, is_causal = None, False
    if causal is axis:
        is_causal = True
    elif valid is not None or causal is not None:
        mask = valid[..., None, :] if valid is not None else None
        if causal is not None:
            tril = _causal(q.shape[-2], k.shape[-2], k.device)
            mask = tril if mask is None else mask & tril
    p = float(att_dropout) if training else 0.0
    if p and att_dropout_broadcast:
        out = _broadcast_dropout_attention(q, k, v, mask, is_causal, scale, p)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal, scale=scale)
    shape = tuple(out.shape[:nb]) + tuple(_sizes(query, q_spatial)) + tuple(_sizes(values, v_feat))
    if out.shape != shape:
        out = out.reshape(shape)
    feature_dim = values.feature_dim if _has(v_feat, values.feature_dim) else None
    return Tensor(out, batch + q_spatial + v_feat, feature_dim=feature_dim)


def _zero_query_padding(caller: str, q: torch.Tensor, order: tuple, batch: tuple, q_spatial: tuple) -> torch.Tensor:
    """q with the padding frames of its dynamic query dims zeroed: a NaN query row makes NaN
    weights, and their gradient (0 * NaN) would reach the keys and values of valid frames."""
    valid = None
    for d in q_spatial:
        if d.dyn_size is None:
            continue
        if not all(_has(batch, b) for b in d.dyn_size.dims):
            continue  # lengths over dims the inputs lack: every frame counts as valid
        m = _aligned(get_mask(d, dims_order=order, device=q.device), order[:-1])
        valid = m if valid is None else valid & m
    return q if valid is None else torch.where(valid[..., None], q, 0.0)


def _sizes(x: Tensor, dims: tuple) -> list:
    shape = x.raw.shape
    return [shape[x.dims.index(d)] for d in dims]


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
