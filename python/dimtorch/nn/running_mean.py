"""RunningMean (RETURNN frontend's): an exponential moving average of a tensor's mean over all but some dims."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from .._C import Dim, Tensor, reduce_mean
from .._core.args import check_tensor, dims_arg, dims_str
from .module import Buffer, Module

__all__ = ["RunningMean"]


class RunningMean(Module):
    """`mean` (a buffer over in_dim, or the dims in_dim lists; in the state dict, no gradient) moves
    towards each input's mean over its other dims (valid frames only): mean += alpha * (new - mean),
    in training (always with update_only_in_train=False). forward(x) -> mean (after the update).
    is_prob_distribution=True starts it at 1 / in_dim.size (else 0). dtype None: float32."""

    def __init__(self, in_dim: Union[Dim, Sequence[Dim]], *, alpha: float, dtype=None,
                 is_prob_distribution: Optional[bool] = None, update_only_in_train: bool = True, device=None):
        super().__init__()
        caller = "dimtorch.nn.RunningMean()"
        self.in_dim = in_dim
        self.shape = dims_arg(in_dim, caller, "in_dim")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
            raise ValueError(f"{caller}: alpha must be a number in [0, 1], got {alpha!r}")
        self.alpha, self.is_prob_distribution = float(alpha), bool(is_prob_distribution)
        init = 0.0
        if is_prob_distribution:
            if not isinstance(in_dim, Dim) or in_dim.size is None:
                raise ValueError(f"{caller}: is_prob_distribution needs in_dim to be one static Dim")
            init = 1.0 / in_dim.size
        self.mean = Buffer(self.shape, dtype if dtype is not None else "float32", init=init, device=device)
        self.update_only_in_train = update_only_in_train

    def forward(self, x: Tensor) -> Tensor:
        mean = self.mean
        if self.training or not self.update_only_in_train:
            check_tensor(x, "dimtorch.nn.RunningMean()")
            missing = [d for d in self.shape if d not in x.dims]  # Dim equality is identity
            if missing:
                raise ValueError(f"dimtorch.nn.RunningMean(): x lacks the mean's dims ({dims_str(missing)}) "
                                 f"(x dims: {dims_str(x.dims)})")
            others = [d for d in x.dims if d not in self.shape]
            new = reduce_mean(x, axis=others) if others else x
            with torch.no_grad():
                mean.raw.add_(self.alpha * (new.raw_aligned(self.shape).to(mean.raw.dtype) - mean.raw))
        return mean
