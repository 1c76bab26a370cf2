"""rf normalization modules (RETURNN frontend's names, defaults and parameters): LayerNorm (`scale`, `bias`;
eps 1e-6), RMSNorm (`scale`, optional `bias`), BatchNorm (`gamma`, `beta`, auxiliary `running_mean`,
`running_variance`; eps 1e-3, momentum 0.1), GroupNorm, GroupNormSpatial, Normalize.

BatchNorm follows RETURNN's two paths: when the source has a dim with lengths other than in_dim and
use_mask is not False (None means True, rf's newest behaviour), statistics over valid frames only and
running statistics updated with the biased batch variance (rf's generic path); otherwise torch's fused
batch norm (F.batch_norm: the running variance updated with the unbiased one, as rf's torch backend).
Training is the run context's train flag (for BatchNorm.__call__), as rf."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F

from .. import _C
from .._C import Dim, Tensor
from .._core import tracing as _tracing
from .._core.args import dim_str, dims_str
from ..nn import normalization as _nn_norm
from ..ops.packing import _valid_index
from .module import Module
from .parameter import Parameter

__all__ = ["LayerNorm", "RMSNorm", "BatchNorm", "GroupNorm", "GroupNormSpatial", "Normalize"]


def _param_dims(in_dim) -> list:
    return [in_dim] if isinstance(in_dim, Dim) else list(in_dim)


class LayerNorm(Module):
    """LayerNorm(in_dim, *, eps=1e-6, with_bias=True): (x - mean) / sqrt(var + eps) * scale + bias over in_dim
    (a Dim, or several); one F.layer_norm for one dim."""

    def __init__(self, in_dim: Union[Dim, Sequence[Dim]], *, eps: float = 1e-6, with_bias: bool = True):
        super().__init__()
        self.in_dim, self.eps = in_dim, eps
        self.scale = Parameter(_param_dims(in_dim))
        self.scale.initial = 1.0
        self.bias = None
        if with_bias:
            self.bias = Parameter(self.scale.dims)
            self.bias.initial = 0.0

    def __call__(self, x: Tensor) -> Tensor:
        if isinstance(self.in_dim, Dim):
            try:
                return _C.layer_norm(x, self.in_dim, weight=self.scale, bias=self.bias, eps=self.eps)
            except (TypeError, ValueError):
                if not isinstance(x, Tensor) or self.in_dim not in x.dims:
                    raise ValueError(f"dimtorch.rf.LayerNorm(): x lacks the in_dim {dim_str(self.in_dim)} "
                                     f"(x: {dims_str(x.dims) if isinstance(x, Tensor) else type(x).__name__})") from None
                raise
        axis = list(self.in_dim)
        mean, variance = _C.moments(x, axis=axis)
        out = (x - mean) * _C.rsqrt(variance + self.eps) * self.scale
        return out + self.bias if self.bias is not None else out

    def extra_repr(self) -> str:
        return f"in_dim={self.in_dim!r}, eps={self.eps}"


class RMSNorm(Module):
    """RMSNorm(in_dim, *, eps=1e-6, with_bias=False): x / sqrt(mean(x^2) + eps) * scale (+ bias)."""

    def __init__(self, in_dim: Union[Dim, Sequence[Dim]], *, eps: float = 1e-6, with_bias: bool = False):
        super().__init__()
        self.in_dim, self.eps = in_dim, eps
        self.scale = Parameter(_param_dims(in_dim))
        self.scale.initial = 1.0
        self.bias = None
        if with_bias:
            self.bias = Parameter(self.scale.dims)
            self.bias.initial = 0.0

    def __call__(self, x: Tensor) -> Tensor:
        if isinstance(self.in_dim, Dim):
            out = _C.rms_norm(x, self.in_dim, weight=self.scale, eps=self.eps)
        else:
            variance = _C.reduce_mean(_C.square(x), axis=list(self.in_dim))
            out = x * _C.rsqrt(variance + self.eps) * self.scale
        return out + self.bias if self.bias is not None else out


class BatchNorm(Module):
    """BatchNorm(in_dim, *, affine=True, momentum=0.1, eps=1e-3, track_running_stats=True, use_mask=None):
    statistics over all dims but in_dim (see the module docstring for the two paths)."""

    def __init__(self, in_dim: Dim, *, affine: bool = True, momentum: float = 0.1, eps: float = 1e-3,
                 track_running_stats: bool = True, use_mask: Optional[bool] = None, distributed: Optional[bool] = None):
        super().__init__()
        if not isinstance(in_dim, Dim):
            raise TypeError(f"dimtorch.rf.BatchNorm(): in_dim must be a Dim, got {type(in_dim).__name__}")
        if distributed:
            raise NotImplementedError("dimtorch.rf.BatchNorm(): distributed=True: use dimtorch.nn.SyncBatchNorm")
        self.in_dim, self.use_mask, self.momentum, self.eps = in_dim, use_mask, momentum, eps
        self.distributed = False
        self.running_mean = self.running_variance = None
        if track_running_stats:
            self.running_mean = Parameter([in_dim], auxiliary=True)
            self.running_mean.initial = 0.0
            self.running_variance = Parameter([in_dim], auxiliary=True)
            self.running_variance.initial = 1.0
        self.affine = affine
        self.gamma = self.beta = None
        if affine:
            self.gamma = Parameter([in_dim])
            self.gamma.initial = 1.0
            self.beta = Parameter([in_dim])
            self.beta.initial = 0.0

    def __call__(self, source: Tensor) -> Tensor:
        if not isinstance(source, Tensor) or self.in_dim not in source.dims:
            raise ValueError(f"dimtorch.rf.BatchNorm(): source lacks the in_dim {dim_str(self.in_dim)} (source: "
                             f"{dims_str(source.dims) if isinstance(source, Tensor) else type(source).__name__})")
        training = self.training
        masked = self.use_mask is not False and any(d.lengths is not None for d in source.dims if d is not self.in_dim)
        if not masked:
            return self._fused(source, training)
        axis = [d for d in source.dims if d is not self.in_dim]
        if training and not _tracing.tracing():
            out = self._packed(source, axis)
            if out is not None:
                return out
        if training:
            source = source.copy_masked(0.0)  # NaN padding would reach gamma's gradient as 0 * NaN
        if self.running_mean is None or training:
            mean, variance = _C.moments(source, axis=axis)
            if self.running_mean is not None:
                with torch.no_grad():  # running += (stat - running) * momentum, one op each
                    self.running_mean.raw.lerp_(mean.raw.detach(), self.momentum)
                    self.running_variance.raw.lerp_(variance.raw.detach(), self.momentum)
        else:
            mean, variance = self.running_mean, self.running_variance
        # (x - mean) * scale (+ beta) with scale = rsqrt(variance + eps) (* gamma) over in_dim alone: the
        # centering stays first (a large mean does not lose x's digits), one pass less over x.
        scale = _C.rsqrt(variance + self.eps)
        if self.gamma is not None:
            scale = scale * self.gamma
        if source.dims[-1] is self.in_dim and mean.dims == scale.dims == (self.in_dim,) and (
                self.beta is None or self.beta.dims == (self.in_dim,)):
            # in_dim last (the usual layout): torch broadcasts the per-channel vectors as they are
            centered = source.raw - mean.raw
            raw = centered * scale.raw if self.beta is None else torch.addcmul(self.beta.raw, centered, scale.raw)
            return Tensor(raw, source.dims, feature_dim=source.feature_dim)
        bn = (source - mean) * scale
        if self.beta is not None:
            bn = bn + self.beta
        return bn

    def _packed(self, source: Tensor, axis: list) -> Optional[Tensor]:
        """Training on padded frames, eagerly: the valid frames gathered into (frames, in_dim) by their index
        (made once per dims from the host lengths, cached on the dim, as pack_padded's) and torch's fused
        batch norm over them, scattered back into zeros; the running statistics from the same frames (biased
        variance, as the generic path). A few ops and nodes where moments and the scale take ~25 (a Conformer
        block's norm over 8 x 2 frames of 64: forward + backward ~310 -> ~200 us). None (the generic path)
        without a valid frame, or with lengths over a dim the source lacks."""
        dims = tuple(axis)
        for d in dims:
            if d.lengths is not None and not all(any(b is e for e in dims) for b in d.lengths.dims):
                return None
        raw = source.raw_aligned(dims + (self.in_dim,))
        index = _valid_index(dims, list(raw.shape[:-1]), raw.device)
        if index.shape[0] == 0:
            return None
        flat = raw.reshape(-1, raw.shape[-1])
        frames = flat.index_select(0, index)
        out, _, _ = torch.native_batch_norm(frames, self.gamma.raw if self.gamma is not None else None,
                                            self.beta.raw if self.beta is not None else None, None, None, True,
                                            0.0, self.eps)
        if self.running_mean is not None:
            with torch.no_grad():  # running += (stat - running) * momentum, one op each
                variance, mean = torch.var_mean(frames, 0, correction=0)
                self.running_mean.raw.lerp_(mean, self.momentum)
                self.running_variance.raw.lerp_(variance, self.momentum)
        out = out.new_zeros(flat.shape).index_copy(0, index, out).view(raw.shape)
        return Tensor(out, dims + (self.in_dim,), feature_dim=source.feature_dim)

    def _fused(self, source: Tensor, training: bool) -> Tensor:
        """F.batch_norm over source with in_dim as its channel axis (second)."""
        rest = [d for d in source.dims if d is not self.in_dim]
        order = tuple(rest[:1] + [self.in_dim] + rest[1:]) if rest else (self.in_dim,)
        raw = source.raw if source.dims == order else source.raw_aligned(order)
        if not rest:
            raw = raw[None]
        rm = self.running_mean.raw if self.running_mean is not None else None
        rv = self.running_variance.raw if self.running_variance is not None else None
        out = F.batch_norm(raw, rm, rv, self.gamma.raw if self.gamma is not None else None,
                           self.beta.raw if self.beta is not None else None, training or rm is None, self.momentum,
                           self.eps)
        if not rest:
            out = out[0]
        return Tensor(out, order, feature_dim=source.feature_dim)

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, momentum={self.momentum}, eps={self.eps}, use_mask={self.use_mask}"


class GroupNorm(Module, _nn_norm.GroupNorm):
    """GroupNorm(in_dim, *, num_groups, eps=1e-6): rf's per-frame group norm (statistics over each group's
    channels), `scale` and `bias` over in_dim (dimtorch.nn.GroupNorm)."""


class GroupNormSpatial(Module, _nn_norm.GroupNormSpatial):
    """GroupNormSpatial(in_dim, *, num_groups, eps=1e-6), called with spatial_dim=: torch's group norm over
    each group's channels and the spatial dim(s), valid frames only (dimtorch.nn.GroupNormSpatial)."""


class Normalize(Module, _nn_norm.Normalize):
    """Normalize(*, param_dims, epsilon=1e-6, scale=True, bias=True), called with axis=
    (dimtorch.nn.Normalize)."""
