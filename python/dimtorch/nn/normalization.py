"""Normalization layers: LayerNorm, RMSNorm, BatchNorm (masked statistics, running-stat buffers), GroupNorm,
GroupNormSpatial, Normalize."""
from __future__ import annotations

from typing import Sequence, Union

from .. import _C
from .._C import Dim, Tensor, batch_norm, merge_dims
from .._core.args import dim_str, dims_str
from ..ops.normalize import normalize
from ..ops.shape import split_dims
from .linear import check_in_dim
from .module import Buffer, Module, Parameter


class LayerNorm(Module):
    """Layer norm over in_dim (F.layer_norm) with scale (ones) and bias (zeros) over (in_dim,)."""

    def __init__(self, in_dim: Dim, *, eps: float = 1e-5, with_bias: bool = True, dtype="float32", device=None):
        super().__init__()
        self.in_dim, self.eps = in_dim, eps
        self.scale = Parameter((in_dim,), dtype, init=1.0, device=device)
        self.bias = Parameter((in_dim,), dtype, init=0.0, device=device) if with_bias else None

    def forward(self, x: Tensor) -> Tensor:
        try:
            return _C.layer_norm(x, self.in_dim, weight=self.scale, bias=self.bias, eps=self.eps)
        except (TypeError, ValueError):
            check_in_dim(self, x, self.in_dim)
            raise

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, eps={self.eps}"


class RMSNorm(Module):
    """RMS norm over in_dim (F.rms_norm) with scale (ones) over (in_dim,)."""

    def __init__(self, in_dim: Dim, *, eps: float = 1e-6, dtype="float32", device=None):
        super().__init__()
        self.in_dim, self.eps = in_dim, eps
        self.scale = Parameter((in_dim,), dtype, init=1.0, device=device)

    def forward(self, x: Tensor) -> Tensor:
        try:
            return _C.rms_norm(x, self.in_dim, weight=self.scale, eps=self.eps)
        except (TypeError, ValueError):
            check_in_dim(self, x, self.in_dim)
            raise

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, eps={self.eps}"


class BatchNorm(Module):
    """Batch norm over the feature dim in_dim (dt.batch_norm): statistics over all other dims, valid
    frames only (use_mask); running_mean/running_var buffers (persistent) updated in training with
    `momentum` as torch does; eval uses them. affine=False drops scale and bias."""

    def __init__(self, in_dim: Dim, *, momentum: float = 0.1, eps: float = 1e-5, use_mask: bool = True,
                 affine: bool = True, dtype="float32", device=None):
        super().__init__()
        self.in_dim, self.momentum, self.eps, self.use_mask = in_dim, momentum, eps, use_mask
        self.affine = affine
        self.running_mean = Buffer((in_dim,), dtype, init=0.0, device=device)
        self.running_var = Buffer((in_dim,), dtype, init=1.0, device=device)
        self.scale = Parameter((in_dim,), dtype, init=1.0, device=device) if affine else None
        self.bias = Parameter((in_dim,), dtype, init=0.0, device=device) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or self.in_dim not in x.dims:
            check_in_dim(self, x, self.in_dim)
        return batch_norm(x, self.in_dim, running_mean=self.running_mean, running_var=self.running_var,
                          weight=self.scale, bias=self.bias, training=self.training, momentum=self.momentum,
                          eps=self.eps, use_mask=self.use_mask)

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, momentum={self.momentum}, eps={self.eps}, use_mask={self.use_mask}"


def _groups(in_dim: Dim, num_groups: Union[int, Dim], caller: str) -> tuple:
    """(groups dim, in-group dim) splitting in_dim."""
    if not isinstance(in_dim, Dim) or in_dim.size is None:
        raise TypeError(f"{caller}: in_dim must be a static Dim, got {in_dim!r}")
    groups = num_groups if isinstance(num_groups, Dim) else None
    size = num_groups.size if groups is not None else num_groups
    if isinstance(size, bool) or not isinstance(size, int) or size < 1 or in_dim.size % size:
        raise ValueError(f"{caller}: num_groups must be an int >= 1 or a static Dim dividing in_dim "
                         f"{dim_str(in_dim)}, got {num_groups!r}")
    return groups or Dim(size, name="groups"), Dim(in_dim.size // size, name=f"{in_dim.name}_per_group")


class GroupNorm(Module):
    """RETURNN frontend's GroupNorm (not torch's): in_dim split into num_groups groups, each normalized over
    its own channels at each frame (no pooling over time or space; so padding frames reach nothing), then
    scale (ones) and bias (zeros) over in_dim. For torch's spatially pooled form see GroupNormSpatial.
    forward(x) -> Tensor with x's dims (in_dim in its place)."""

    def __init__(self, in_dim: Dim, *, num_groups: Union[int, Dim], eps: float = 1e-6, dtype="float32",
                 device=None):
        super().__init__()
        self.in_dim, self.eps = in_dim, eps
        self.num_groups, self.in_group_dim = _groups(in_dim, num_groups, f"{type(self).__name__}()")
        self.scale = Parameter((in_dim,), dtype, init=1.0, device=device)
        self.bias = Parameter((in_dim,), dtype, init=0.0, device=device)

    def _split(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or self.in_dim not in x.dims:
            check_in_dim(self, x, self.in_dim)
        return split_dims(x, axis=self.in_dim, dims=(self.num_groups, self.in_group_dim))

    def _merge(self, h: Tensor) -> Tensor:
        h, _ = merge_dims(h, dims=(self.num_groups, self.in_group_dim), out_dim=self.in_dim)
        return h * self.scale + self.bias

    def forward(self, x: Tensor) -> Tensor:
        h = _C.layer_norm(self._split(x), self.in_group_dim, eps=self.eps)  # per group and frame
        return self._merge(h)

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, num_groups={self.num_groups.size}, eps={self.eps}"


class GroupNormSpatial(GroupNorm):
    """Group norm as torch.nn.GroupNorm (RETURNN frontend's GroupNormSpatial): statistics per group over its
    channels and the given spatial dim(s), valid frames only (batch independent), then scale and bias over
    in_dim. forward(x, spatial_dim=) (a Dim or several) -> Tensor with x's dims."""

    def forward(self, x: Tensor, *, spatial_dim: Union[Dim, Sequence[Dim]]) -> Tensor:
        spatial = [spatial_dim] if isinstance(spatial_dim, Dim) else list(spatial_dim)
        for d in spatial:
            if not isinstance(d, Dim) or not isinstance(x, Tensor) or d not in x.dims:
                got = dims_str(x.dims) if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(f"GroupNormSpatial(): x lacks the spatial_dim {d!r} (x dims: {got})")
        return self._merge(normalize(self._split(x), axis=[self.in_group_dim] + spatial, epsilon=self.eps))


class Normalize(Module):
    """dt.normalize with a trainable scale (ones) and bias (zeros) over param_dims (RETURNN frontend's
    Normalize). forward(a, axis=) -> scale * normalize(a, axis=, epsilon=) + bias."""

    def __init__(self, *, param_dims: Union[Dim, Sequence[Dim]], epsilon: float = 1e-6, scale: bool = True,
                 bias: bool = True, dtype="float32", device=None):
        super().__init__()
        dims = (param_dims,) if isinstance(param_dims, Dim) else tuple(param_dims)
        if not dims or not all(isinstance(d, Dim) and d.size is not None for d in dims):
            raise TypeError(f"Normalize(): param_dims must be static Dims, got {param_dims!r}")
        self.param_dims, self.epsilon = dims, epsilon
        self.scale = Parameter(dims, dtype, init=1.0, device=device) if scale else None
        self.bias = Parameter(dims, dtype, init=0.0, device=device) if bias else None

    def forward(self, a: Tensor, *, axis: Union[Dim, Sequence[Dim]]) -> Tensor:
        norm = normalize(a, axis=axis, epsilon=self.epsilon)
        if self.scale is not None:
            norm = self.scale * norm
        if self.bias is not None:
            norm = norm + self.bias
        return norm

    def extra_repr(self) -> str:
        return f"param_dims=({dims_str(self.param_dims)}), epsilon={self.epsilon}"
