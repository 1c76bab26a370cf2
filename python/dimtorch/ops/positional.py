"""Positional encodings: sinusoidal (absolute and relative, RETURNN frontend's) and rotary (apply_rope)."""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch

from .._core import dim_cache as _dim_cache, tracing as _tracing
from .._C import Dim, Tensor
from .._core.dtypes import to_torch_dtype
from .._core.args import check_tensor, dim_str, dims_str
from ._support import names_errors, padded_size

_RAW_CACHE: dict = {}  # (kind, sizes..., dtype, device) -> raw; host-computed once, bounded below
_MAX_CACHED = 256


def _cached(key, make) -> torch.Tensor:
    """make(), cached under key; while tracing made in the graph (sizes may be symbolic there)."""
    if _tracing.tracing():
        return make()
    raw = _RAW_CACHE.get(key)
    if raw is None:
        if len(_RAW_CACHE) >= _MAX_CACHED:
            _RAW_CACHE.clear()
        raw = _RAW_CACHE[key] = make()
    return raw


_CPU = torch.device("cpu")


def _float_dtype(dtype, caller: str) -> torch.dtype:
    if dtype is None:
        return torch.float32
    dt_ = to_torch_dtype(dtype, caller)
    if not dt_.is_floating_point:
        raise ValueError(f"{caller}: dtype must be a float dtype, got {dtype!r}")
    return dt_


def _device(device) -> torch.device:
    if device is None:
        return _CPU
    return device if isinstance(device, torch.device) else torch.device(device)


def _half_of(feat_dim, caller: str, minimum: int) -> int:
    if not isinstance(feat_dim, Dim):
        raise TypeError(f"{caller}: feat_dim must be a Dim, got {type(feat_dim).__name__}")
    size = feat_dim.size
    if size is None or size % 2 or size < minimum:
        raise ValueError(f"{caller}: feat_dim {dim_str(feat_dim)} must be static, even and >= {minimum}")
    return size // 2


def _sin_cos(positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """(..., F): sin(p * w_k) for k < F/2, then cos(p * w_k); computed in float64."""
    arg = positions.to(torch.float64)[..., None] * freqs
    return torch.cat((torch.sin(arg), torch.cos(arg)), dim=-1)


def _absolute_freqs(half: int, base: float, device) -> torch.Tensor:
    """w_k = base^(-k / (F/2 - 1)), k < F/2 (RETURNN frontend's sinusoidal_encoding)."""
    return torch.exp(torch.arange(half, dtype=torch.float64, device=device) * -(math.log(base) / (half - 1)))


def _relative_freqs(half: int, device) -> torch.Tensor:
    """w_k = 10000^(-2k / F), k < F/2 (Transformer-XL's; RETURNN frontend's relative encoding)."""
    return torch.exp(torch.arange(half, dtype=torch.float64, device=device) * -(2.0 * math.log(1e4) / (2 * half)))


@names_errors("dimtorch.sinusoidal_encoding()")
def sinusoidal_encoding(indices: Tensor, *, feat_dim: Dim, base: Union[int, float] = 1e4, dtype=None) -> Tensor:
    """Sinusoidal encoding of position values: over indices' dims and `feat_dim` (last), the first
    half sin(p * w_k), the second half cos(p * w_k), w_k = base^(-k / (F/2 - 1)), F = feat_dim's
    size (even, >= 4). `indices` may hold any numbers (e.g. per-sequence offsets added)."""
    caller = "dimtorch.sinusoidal_encoding()"
    check_tensor(indices, caller, what="indices")
    half = _half_of(feat_dim, caller, 4)
    if feat_dim in indices.dims:
        raise ValueError(f"{caller}: feat_dim {dim_str(feat_dim)} is already a dim of indices "
                         f"(dims: {dims_str(indices.dims)})")
    out_dtype = _float_dtype(dtype, caller)
    raw = indices.raw
    freqs = _cached(("abs_freqs", half, float(base), raw.device),
                    lambda: _absolute_freqs(half, float(base), raw.device))
    return Tensor(_sin_cos(raw, freqs).to(out_dtype), indices.dims + (feat_dim,), feature_dim=feat_dim)


@names_errors("dimtorch.sinusoidal_positional_encoding()")
def sinusoidal_positional_encoding(*, spatial_dim: Optional[Dim], feat_dim: Dim,
                                   offset: Optional[Union[int, Tensor]] = None, base: Union[int, float] = 1e4,
                                   dtype=None, device=None) -> Tensor:
    """Absolute sinusoidal positional encoding (see sinusoidal_encoding) of positions
    0..size-1 of `spatial_dim` (its max size for a dynamic dim), plus `offset`.

    Dims: (spatial_dim, feat_dim); with an offset Tensor (e.g. per sequence, over batch) its dims
    come first; spatial_dim=None is one step at position `offset` (RETURNN's single_step_dim):
    dims (offset's dims, feat_dim). Without an offset Tensor the raw is computed on the host once
    per (size, feat_dim, offset, base, dtype, device) and cached."""
    caller = "dimtorch.sinusoidal_positional_encoding()"
    fast = _fast_lookup((id(spatial_dim), id(feat_dim), offset, base, dtype, device)) if type(offset) is not Tensor \
        else None
    if fast is not None and fast[0]() is spatial_dim and fast[1]() is feat_dim and not _tracing.tracing():
        return Tensor(fast[2], (spatial_dim, feat_dim), feature_dim=feat_dim)
    half = _half_of(feat_dim, caller, 4)
    out_dtype, dev = _float_dtype(dtype, caller), _device(device)
    if isinstance(offset, bool) or (offset is not None and not isinstance(offset, (int, Tensor))):
        raise TypeError(f"{caller}: offset must be None, an int or an integer dimtorch.Tensor, "
                        f"got {type(offset).__name__}")
    if spatial_dim is None:
        if offset is None:
            raise ValueError(f"{caller}: spatial_dim=None (one step) needs the step's position as offset")
        positions = offset.raw if isinstance(offset, Tensor) else torch.tensor(offset, device=dev)
        dims = offset.dims if isinstance(offset, Tensor) else ()
        return _encode(positions, dims, feat_dim, half, base, out_dtype)
    if not isinstance(spatial_dim, Dim):
        raise TypeError(f"{caller}: spatial_dim must be a Dim or None, got {type(spatial_dim).__name__}")
    n = padded_size(spatial_dim, caller, what="spatial_dim")  # (while tracing: its padded size in the trace)
    if isinstance(offset, Tensor):
        if spatial_dim in offset.dims or feat_dim in offset.dims:
            raise ValueError(f"{caller}: offset (dims: {dims_str(offset.dims)}) must not have spatial_dim "
                             f"or feat_dim")
        positions = offset.raw[..., None] + torch.arange(n, device=offset.raw.device)
        return _encode(positions, offset.dims + (spatial_dim,), feat_dim, half, base, out_dtype)
    if _tracing.tracing():  # computed in the graph at the traced size (nothing cached)
        positions = torch.arange(n, device=dev) + (offset or 0)
        return _encode(positions, (spatial_dim,), feat_dim, half, base, out_dtype)
    raw = sinusoidal_raw(n, 2 * half, offset or 0, base, dtype=out_dtype, device=dev)
    _remember((id(spatial_dim), id(feat_dim), offset, base, dtype, device), spatial_dim, feat_dim, raw)
    return Tensor(raw, (spatial_dim, feat_dim), feature_dim=feat_dim)


# The last calls' results by argument ids, checked by weak refs (no Dim is held): a model asks for the
# same encoding call after call, and the checks and cache keys cost more than the lookup itself.
_FAST: dict = {}


def _fast_lookup(key):
    """The remembered result for key, or None (also for arguments that cannot be a key: the checks
    below name them)."""
    try:
        return _FAST.get(key)
    except TypeError:
        return None


def _remember(key, a: Dim, b: Dim, value) -> None:
    """Keeps value for key while the dims a and b live (their weak refs drop the entry)."""
    _dim_cache.store_while_both_live(_FAST, key, a, b, value)


def _forget(dim: Dim) -> None:
    """Drops the results remembered for calls over `dim` (new lengths bound to it)."""
    for key, entry in list(_FAST.items()):
        if entry[0]() is dim or entry[1]() is dim:
            _FAST.pop(key, None)


_dim_cache.on_forget(_forget)


def sinusoidal_raw(n: int, feat: int, start: int = 0, base: Union[int, float] = 1e4, *, dtype=torch.float32,
                   device=None) -> torch.Tensor:
    """Raw (n, feat): sinusoidal_encoding of positions start..start+n-1; host-computed once per
    arguments and cached."""
    dev = _device(device)
    return _cached(("abs", n, feat, start, float(base), dtype, dev),
                   lambda: _sin_cos(torch.arange(start, start + n), _absolute_freqs(feat // 2, float(base), None))
                   .to(device=dev, dtype=dtype))


def _encode(positions: torch.Tensor, dims: tuple, feat_dim: Dim, half: int, base, out_dtype) -> Tensor:
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError("dimtorch.sinusoidal_positional_encoding(): offset must hold integers, got "
                        f"{positions.dtype}")
    freqs = _cached(("abs_freqs", half, float(base), positions.device),
                    lambda: _absolute_freqs(half, float(base), positions.device))
    return Tensor(_sin_cos(positions, freqs).to(out_dtype), dims + (feat_dim,), feature_dim=feat_dim)


def relative_positional_encoding_raw(query_size: int, kv_size: int, feat: int, query_offset: int = 0,
                                     *, dtype=torch.float32, device=None) -> torch.Tensor:
    """Raw (query_size - 1 + kv_size, feat): row r encodes the distance d = r - (query_size - 1) -
    query_offset as concat(sin(d * w_k), cos(d * w_k)), w_k = 10000^(-2k / feat) (an odd feat gets
    a zero last column). Host-computed once per arguments and cached."""
    dev = _device(device)

    def make():  # (an empty time, e.g. a batch of length-0 sequences only: no rows)
        distances = torch.arange(max(0, query_size - 1 + kv_size)) - (query_size - 1) - query_offset
        pe = _sin_cos(distances, _relative_freqs(feat // 2, None))
        if feat % 2:
            pe = torch.nn.functional.pad(pe, (0, 1))
        return pe.to(device=dev, dtype=dtype)

    return _cached(("rel", query_size, kv_size, feat, query_offset, dtype, dev), make)


@names_errors("dimtorch.relative_positional_encoding()")
def relative_positional_encoding(*, query_spatial_dim: Optional[Dim], key_value_spatial_dim: Dim, feat_dim: Dim,
                                 query_offset: int = 0, dtype=None, device=None) -> Tuple[Tensor, Dim]:
    """Transformer-XL's sinusoidal relative positional encoding (RETURNN frontend's); returns
    (encoding, out_spatial_dim).

    Over (out_spatial_dim, feat_dim), out_spatial_dim static of size Tq - 1 + Tkv (the max sizes):
    row r encodes the distance (key position - query position) r - (Tq - 1) - query_offset, from
    -(Tq - 1) to Tkv - 1, as concat(sin(d * w_k), cos(d * w_k)), w_k = 10000^(-2k / F). A consumer
    picks row j - i + Tq - 1 for query i and key j, the same for every sequence of a batch. The
    same dims give the same out_spatial_dim (cached on the query dim).
    query_spatial_dim=None (one step, the query the last frame of each sequence's keys): over
    (key lengths' dims, key_value_spatial_dim, feat_dim), distance j - (T_b - 1) per sequence."""
    caller = "dimtorch.relative_positional_encoding()"
    try:  # (_fast_lookup inline: this is the call a model makes every step)
        fast = _FAST.get(("rel", id(query_spatial_dim), id(key_value_spatial_dim), id(feat_dim), query_offset, dtype,
                          device))
    except TypeError:  # (arguments that cannot be a key: the checks below name them)
        fast = None
    if fast is not None and fast[0]() is query_spatial_dim and fast[1]() is key_value_spatial_dim and \
            not _tracing.tracing():  # (a cached raw is no tensor of a trace)
        raw, out_dim = fast[2]
        return Tensor(raw, (out_dim, feat_dim), feature_dim=feat_dim), out_dim
    half = _half_of(feat_dim, caller, 2)
    out_dtype, dev = _float_dtype(dtype, caller), _device(device)
    if not isinstance(key_value_spatial_dim, Dim):
        raise TypeError(f"{caller}: key_value_spatial_dim must be a Dim, got {type(key_value_spatial_dim).__name__}")
    kv = padded_size(key_value_spatial_dim, caller, what="key_value_spatial_dim")  # (traced: its padded size)
    if type(query_offset) is not int:
        raise TypeError(f"{caller}: query_offset must be an int, got {type(query_offset).__name__}")
    if query_spatial_dim is None:
        if query_offset:
            raise ValueError(f"{caller}: query_offset must be 0 for one step (query_spatial_dim=None)")
        from .mask import get_size_tensor  # noqa: PLC0415
        last = get_size_tensor(key_value_spatial_dim, device=dev)
        distances = torch.arange(kv, device=dev) - (last.raw[..., None] - 1)
        freqs = _cached(("rel_freqs", half, dev), lambda: _relative_freqs(half, dev))
        raw = _sin_cos(distances, freqs).to(out_dtype)
        return (Tensor(raw, last.dims + (key_value_spatial_dim, feat_dim), feature_dim=feat_dim),
                key_value_spatial_dim)
    if not isinstance(query_spatial_dim, Dim):
        raise TypeError(f"{caller}: query_spatial_dim must be a Dim or None, got {type(query_spatial_dim).__name__}")
    q = padded_size(query_spatial_dim, caller, what="query_spatial_dim")
    if _tracing.tracing():
        return _relative_in_graph(q, kv, query_spatial_dim, key_value_spatial_dim, feat_dim, half, query_offset,
                                  out_dtype, dev)
    if q < 1:
        raise ValueError(f"{caller}: query_spatial_dim {dim_str(query_spatial_dim)} has no frames")
    key = ("relpos_dim", id(key_value_spatial_dim), q, kv)
    out_dim = _dim_cache.lookup(query_spatial_dim, key)
    if out_dim is None:
        name = (f"2*{query_spatial_dim.name}-1" if query_spatial_dim is key_value_spatial_dim
                else f"{query_spatial_dim.name}+{key_value_spatial_dim.name}-1")
        out_dim = _dim_cache.store(query_spatial_dim, key, Dim(q - 1 + kv, name=name))
    raw = relative_positional_encoding_raw(q, kv, 2 * half, query_offset, dtype=out_dtype, device=dev)
    if type(query_offset) is int:  # (the out dim is held until a dim of the key dies)
        _remember(("rel", id(query_spatial_dim), id(key_value_spatial_dim), id(feat_dim), query_offset, dtype, device),
                  query_spatial_dim, key_value_spatial_dim, (raw, out_dim))
    return Tensor(raw, (out_dim, feat_dim), feature_dim=feat_dim), out_dim


def _relative_in_graph(q, kv, query_spatial_dim: Dim, key_value_spatial_dim: Dim, feat_dim: Dim, half: int,
                      query_offset: int, out_dtype, dev) -> Tuple[Tensor, Dim]:
    """relative_positional_encoding while tracing: computed in the graph at the traced sizes; its out dim
    a dim of symbolic size Tq - 1 + Tkv made in the trace (not cached on the query dim)."""
    distances = torch.arange(q - 1 + kv, device=dev) - (q - 1) - query_offset
    pe = _sin_cos(distances, _relative_freqs(half, dev))
    if 2 * half < feat_dim.size:
        pe = torch.nn.functional.pad(pe, (0, 1))
    name = (f"2*{query_spatial_dim.name}-1" if query_spatial_dim is key_value_spatial_dim
            else f"{query_spatial_dim.name}+{key_value_spatial_dim.name}-1")
    out_dim = Dim(q - 1 + kv, name=name)
    return Tensor(pe.to(out_dtype), (out_dim, feat_dim), feature_dim=feat_dim), out_dim


def rope_raw(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """x (..., D) with each pair (x[2i], x[2i+1]) rotated by the angle whose sine and cosine are
    sin[..., i], cos[..., i] (broadcast against (..., D/2))."""
    pairs = x.unflatten(-1, (-1, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


@names_errors("dimtorch.apply_rope()")
def apply_rope(x: Tensor, pos_enc: Tensor, feat_dim: Dim) -> Tensor:
    """Rotary position embedding (RoPE) of x along `feat_dim`: each pair (x[2i], x[2i+1]) is
    rotated by the angle whose sine is pos_enc[i] and cosine pos_enc[D/2 + i] (pos_enc over
    feat_dim, as sinusoidal_positional_encoding gives it, its other dims, e.g. the spatial dim,
    among x's). Output dims: x's other dims, then feat_dim."""
    caller = "dimtorch.apply_rope()"
    check_tensor(x, caller)
    check_tensor(pos_enc, caller, what="pos_enc")
    _half_of(feat_dim, caller, 2)
    if feat_dim not in x.dims or feat_dim not in pos_enc.dims:
        raise ValueError(f"{caller}: feat_dim {dim_str(feat_dim)} must be in x (dims: {dims_str(x.dims)}) and in "
                         f"pos_enc (dims: {dims_str(pos_enc.dims)})")
    extra = [d for d in pos_enc.dims if d not in x.dims]
    if extra:
        raise ValueError(f"{caller}: pos_enc has dims ({dims_str(extra)}) that x lacks (x dims: {dims_str(x.dims)})")
    order = tuple(d for d in x.dims if d is not feat_dim) + (feat_dim,)
    raw = x.raw if x.dims == order else x.raw_aligned(order)
    pe = pos_enc.raw if pos_enc.dims == order else pos_enc.raw_aligned(order)
    for i, d in enumerate(order[:-1]):
        if pe.shape[i] not in (1, raw.shape[i]):
            # a dynamic dim whose raws have different padding (e.g. x padded past the longest sequence)
            n = min(pe.shape[i], raw.shape[i])
            if d.lengths is None or (not _tracing.tracing() and n < d.get_max_size()):
                raise ValueError(f"{caller}: dim {dim_str(d)} has raw size {raw.shape[i]} in x but {pe.shape[i]} in "
                                 f"pos_enc")
            raw, pe = raw.narrow(i, 0, n), pe.narrow(i, 0, n)
    sin, cos = pe.chunk(2, dim=-1)
    return Tensor(rope_raw(raw, sin, cos), order, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim)
