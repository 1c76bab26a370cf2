"""narrow_to_longest: a layer's input without the raw frames beyond the longest sequence."""
from __future__ import annotations

from .._C import Dim, Tensor
from .._core.tracing import tracing

__all__ = ["narrow_to_longest"]


def narrow_to_longest(x: Tensor, spatial_dim: Dim) -> Tensor:
    """x without the frames of spatial_dim beyond the longest sequence (a raw may have such frames: they
    are padding); x itself when it has none. Layers whose convolutions return the longest length (dt.conv
    narrows to it) call this first, so that their residual sums see one raw size. While tracing, x is
    kept as it is (the ops keep the raw size there)."""
    if spatial_dim.lengths is None or tracing():
        return x
    a = x.dims.index(spatial_dim)
    n = spatial_dim.get_max_size()
    raw = x.raw
    if raw.shape[a] <= n:
        return x
    return Tensor(raw.narrow(a, 0, n), x.dims, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim)
