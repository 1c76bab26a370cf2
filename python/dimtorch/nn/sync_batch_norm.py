"""SyncBatchNorm: batch norm with training statistics over the batches of all processes (data parallel)."""
from __future__ import annotations

import torch

from .._C import Tensor, reduce_sum
from .linear import check_in_dim
from .normalization import BatchNorm

__all__ = ["SyncBatchNorm"]


def _group_size(group) -> int:
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


class SyncBatchNorm(BatchNorm):
    """dt.nn.BatchNorm whose statistics in training are those of the combined batch of every process
    in `process_group` (default: the whole world), as torch.nn.SyncBatchNorm: the mean and variance
    over the valid frames of all processes' batches (two all-reduces of (features + 1) numbers, in
    autograd, so the gradient is that of the combined batch too). With one process, or in eval,
    it is BatchNorm. A process whose batch has no valid frame adds nothing.

    `SyncBatchNorm.convert_sync_batchnorm(module)` turns every dt.nn.BatchNorm in `module` into one.
    """

    def __init__(self, in_dim, *, process_group=None, **kwargs):
        super().__init__(in_dim, **kwargs)
        self.process_group = process_group

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or _group_size(self.process_group) == 1:
            return super().forward(x)
        if not isinstance(x, Tensor) or self.in_dim not in x.dims:
            check_in_dim(self, x, self.in_dim)
        # The functional all-reduce is differentiable (its backward all-reduces the gradient) and
        # capturable by torch.compile; torch.distributed.nn's is deprecated in its favour.
        from torch.distributed._functional_collectives import all_reduce

        group = self.process_group or torch.distributed.group.WORLD
        in_dim, use_mask = self.in_dim, self.use_mask
        reduced = tuple(d for d in x.dims if d is not in_dim)
        # The valid frames: a sum of ones over the reduced dims (their raw sizes from x), masked.
        sizes = [n for d, n in zip(x.dims, x.raw.shape) if d is not in_dim]
        ones = Tensor(torch.ones(sizes, dtype=x.raw.dtype, device=x.raw.device), reduced)
        count = reduce_sum(ones, axis=reduced, use_mask=use_mask).raw.reshape(1)
        local = torch.cat([reduce_sum(x, axis=reduced, use_mask=use_mask).raw, count])
        total = all_reduce(local, "sum", group)
        n = total[-1:]
        n_or_1 = n.clamp(min=1)
        mean = total[:-1] / n_or_1
        centered = x - Tensor(mean, (in_dim,))
        var = all_reduce(reduce_sum(centered * centered, axis=reduced, use_mask=use_mask).raw, "sum", group) / n_or_1
        if self.running_mean is not None:
            with torch.no_grad():
                # Unbiased running variance, var * n / (n - 1) with n - 1 at least 1, as dt.batch_norm.
                unbiased = var * (n / (n - 1).clamp(min=1))
                self.running_mean.raw.lerp_(mean.detach(), self.momentum)
                self.running_var.raw.lerp_(unbiased, self.momentum)
        factor = torch.rsqrt(var + self.eps)
        if self.scale is not None:
            factor = factor * self.scale.raw
        out = centered * Tensor(factor, (in_dim,))
        if self.bias is not None:
            out = out + self.bias
        return out

    @classmethod
    def convert_sync_batchnorm(cls, module: torch.nn.Module, process_group=None) -> torch.nn.Module:
        """Turns every dt.nn.BatchNorm in `module` (itself included) into a SyncBatchNorm over
        `process_group`, in place, keeping its parameters, buffers and settings; returns `module`."""
        for m in module.modules():
            if type(m) is BatchNorm:
                m.__class__ = cls
                m.process_group = process_group
        return module

    def extra_repr(self) -> str:
        return super().extra_repr() + ", synced"
