"""window: sliding windows over a dim (RETURNN frontend's rf.window), for chunked or local attention and
frame stacking: a view of x unfolded along the dim, each sequence padded as it would be alone."""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from .._core import in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, dims_str
from .conv_args import given_out_spatial_dims, out_spatial_dim as _strided_out_dim
from ._support import names_errors

_CALLER = "dimtorch.window()"
_pad = torch._C._nn.pad  # F.pad's constant mode without its Python frame


def _width(value, what: str) -> Optional[int]:
    """window_left / window_right: None, an int >= 0 or a static Dim, as an int."""
    if value is None:
        return None
    if isinstance(value, Dim):
        if value.size is None:
            raise ValueError(f"{_CALLER}: {what} must be static, got {dim_str(value)}")
        return value.size
    if type(value) is not int or value < 0:
        raise TypeError(f"{_CALLER}: {what} must be an int >= 0 or a static Dim, got {value!r}")
    return value


def _sides(size: int, left, right) -> Tuple[int, int]:
    """(left, right) frames around each output frame: rf's defaults (right = size // 2 and left the
    rest when neither is given, else the missing one completes size - 1); both given must sum to it."""
    left, right = _width(left, "window_left"), _width(right, "window_right")
    if left is None and right is None:
        right = size // 2
    if left is None:
        left = size - 1 - right
    elif right is None:
        right = size - 1 - left
    if left < 0 or right < 0 or left + right != size - 1:
        raise ValueError(f"{_CALLER}: window_left ({left}) + window_right ({right}) must be the window size - 1 "
                         f"({size - 1})")
    return left, right


@names_errors(_CALLER)
def window(source: Tensor, *, spatial_dim: Dim, window_dim: Dim, window_right: Optional[Union[Dim, int]] = None,
           window_left: Optional[Union[Dim, int]] = None, padding: str = "same",
           pad_value: Optional[Union[int, float]] = None, stride: int = 1, out_spatial_dim: Optional[Dim] = None,
           use_mask: Optional[bool] = None) -> Tuple[Tensor, Dim]:
    """Sliding windows of `window_dim.size` frames over `spatial_dim`; returns (y, out_spatial_dim),
    y over source's dims with spatial_dim replaced by out_spatial_dim, and window_dim last.

    padding="same": output frame t holds input frames t - window_left + w, w in window_dim (frames
    before 0 or past the sequence's own end are `pad_value`, default 0: each sequence as alone);
    window_left/window_right default to rf's centered window (right = size // 2). Output length T,
    or ceildiv(T, stride). padding="valid": output frame t holds frames t + w, T - size + 1 frames
    (0 when shorter), or ceildiv of that by stride. Lengths by dim math; a given out_spatial_dim must
    match (any stride, not only > 1 as in rf). use_mask=False leaves the padding of a shorter
    sequence as it is, so windows near its end read it (rf's use_mask); "valid" never reads it.

    The result is a strided view of the padded source (torch's unfold: no copy besides the pad). A
    Tensor stride and a dynamic window_dim (rf's capacity-bounded windows) are not supported."""
    check_tensor(source, _CALLER, what="source")
    a = axis_of(source, spatial_dim, _CALLER, what="spatial_dim", of="source")
    if not isinstance(window_dim, Dim):
        raise TypeError(f"{_CALLER}: window_dim must be a Dim, got {type(window_dim).__name__}")
    if window_dim.size is None or window_dim.size < 1:
        raise ValueError(f"{_CALLER}: window_dim must be static and >= 1, got {dim_str(window_dim)} (a dynamic "
                         f"window: not supported)")
    if any(d is window_dim for d in source.dims):
        raise ValueError(f"{_CALLER}: window_dim {dim_str(window_dim)} is already a dim of source "
                         f"({dims_str(source.dims)})")
    if isinstance(stride, (Tensor, bool)) or not isinstance(stride, int) or stride < 1:
        raise TypeError(f"{_CALLER}: stride must be an int >= 1 (a Tensor stride: not supported), got {stride!r}")
    if padding not in ("same", "valid"):
        raise ValueError(f"{_CALLER}: padding must be 'same' or 'valid', got {padding!r}")
    if pad_value is None:
        pad_value = 0
    elif isinstance(pad_value, bool) or not isinstance(pad_value, (int, float)):
        raise TypeError(f"{_CALLER}: pad_value must be a Python number, got {type(pad_value).__name__}")
    if use_mask is not None and type(use_mask) is not bool:
        raise TypeError(f"{_CALLER}: use_mask must be None or a bool, got {use_mask!r}")
    size = window_dim.size
    left, right = _sides(size, window_left, window_right) if padding == "same" else (0, 0)
    out_dim = _strided_out_dim(spatial_dim, size, stride, padding)
    in_graph = _tracing.tracing()
    if out_spatial_dim is not None:
        other = source.dims[:a] + source.dims[a + 1:]
        out_dim, = given_out_spatial_dims(_CALLER, (out_spatial_dim,), (out_dim,), other + (window_dim,), not in_graph)
    raw = _padded(source, a, spatial_dim, padding, pad_value, use_mask is not False, in_graph)
    n = raw.shape[a] + left + right
    extra = max(0, size - n)  # no sequence holds one window ("valid"): its result is narrowed to 0 frames
    if left or right or extra:
        raw = _pad(raw, [0, 0] * (raw.dim() - a - 1) + [left, right + extra], "constant", pad_value)
    out = raw.unfold(a, size, stride)
    want = out_dim.size if out_dim.lengths is None else None if in_graph else out_dim.get_max_size()
    if want is not None and out.shape[a] != want:
        out = out.narrow(a, 0, want)
    feature_dim = None if source.feature_dim is spatial_dim else source.feature_dim
    dims = source.dims[:a] + (out_dim,) + source.dims[a + 1:] + (window_dim,)
    return Tensor(out, dims, sparse_dim=source.sparse_dim, feature_dim=feature_dim), out_dim


def _padded(source: Tensor, a: int, spatial_dim: Dim, padding: str, pad_value, use_mask: bool, in_graph: bool):
    """source's raw, narrowed to the longest sequence, with each shorter sequence's padding set to
    pad_value where a "same" window reaches it. While tracing: masked in the graph, not narrowed."""
    raw = source.raw
    if spatial_dim.lengths is None or padding == "valid":
        return raw
    if in_graph:
        return _in_graph.masked(raw, source.dims, pad_value, among=(spatial_dim,)) if use_mask else raw
    n = spatial_dim.get_max_size()
    if raw.shape[a] > n:
        raw = raw.narrow(a, 0, n)
        if not use_mask:
            return raw
        source = Tensor(raw, source.dims)
    return source.copy_masked(pad_value, dims=(spatial_dim,)).raw if use_mask else raw


__all__ = ["window"]
