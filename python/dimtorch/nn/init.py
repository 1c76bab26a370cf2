"""Parameter initializers by named dims: constants, normal, uniform, and variance scaling (Glorot, He).

An initializer is a callable `init(dims, dtype=torch.float32, device=None, *, in_dims=None,
out_dims=None, generator=None) -> torch.Tensor` (the raw, axes in `dims` order). dt.nn.Parameter calls
it with its dims and its `in_dims`/`out_dims` keywords.

Fan-in/fan-out (the convention of variance scaling, as in RETURNN's VarianceScaling and torch's
`_calculate_fan_in_and_fan_out`):
- `in_dims` given: fan_in = the product of the sizes of `in_dims`, fan_out that of `out_dims`
  (default: all dims not in `in_dims`); dims in neither (when both are given) are the receptive
  field (e.g. a kernel dim) and multiply both fans.
- `in_dims` not given: the torch layout, dims[0] is the output dim, dims[1] the input dim, the rest
  the receptive field (a weight stored (out, in, kernel...) as F.linear and F.conv expect). One dim:
  fan_in = fan_out = its size.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from .._C import Dim

__all__ = [
    "Initializer", "Constant", "Zeros", "Ones", "Normal", "TruncatedNormal", "Uniform", "VarianceScaling",
    "Glorot", "GlorotUniform", "GlorotNormal", "XavierUniform", "XavierNormal", "He", "HeNormal",
    "HeUniform", "KaimingNormal", "KaimingUniform", "compute_fans",
]


def _size(d: Dim, caller: str) -> int:
    size = d.size if d.is_static() else None
    if size is None:
        raise ValueError(f"{caller}: dim {d!r} has no static size; parameters need static dims")
    return size


def _contains(dims, d) -> bool:
    return any(e is d for e in dims)


def compute_fans(dims: Sequence[Dim], in_dims: Optional[Sequence[Dim]] = None,
                 out_dims: Optional[Sequence[Dim]] = None) -> tuple:
    """(fan_in, fan_out) of a parameter over `dims` (see the module docstring for the convention)."""
    caller = "dimtorch.nn.init.compute_fans()"
    dims = tuple(dims)
    if in_dims is None and out_dims is not None:
        raise ValueError(f"{caller}: out_dims needs in_dims")
    if in_dims is None:
        if len(dims) == 0:
            return 1, 1
        if len(dims) == 1:
            n = _size(dims[0], caller)
            return n, n
        field = math.prod([_size(d, caller) for d in dims[2:]])
        return _size(dims[1], caller) * field, _size(dims[0], caller) * field
    in_dims = (in_dims,) if isinstance(in_dims, Dim) else tuple(in_dims)
    for d in in_dims:
        if not _contains(dims, d):
            raise ValueError(f"{caller}: in_dims has {d!r}, which is not in dims {dims}")
    if out_dims is None:
        out_dims = tuple(d for d in dims if not _contains(in_dims, d))
    else:
        out_dims = (out_dims,) if isinstance(out_dims, Dim) else tuple(out_dims)
        for d in out_dims:
            if not _contains(dims, d) or _contains(in_dims, d):
                raise ValueError(f"{caller}: out_dims has {d!r}, which is not in dims {dims} or is also in in_dims")
    field = math.prod([_size(d, caller) for d in dims if not _contains(in_dims, d) and not _contains(out_dims, d)])
    fan_in = math.prod([_size(d, caller) for d in in_dims]) * field
    fan_out = math.prod([_size(d, caller) for d in out_dims]) * field
    return fan_in, fan_out


def _shape(dims, caller):
    return [_size(d, caller) for d in dims]


class Initializer:
    """Base class: subclasses implement `__call__(dims, dtype, device, *, in_dims, out_dims, generator)`."""

    def __call__(self, dims, dtype=torch.float32, device=None, *, in_dims=None, out_dims=None, generator=None):
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Constant(Initializer):
    def __init__(self, value: float):
        self.value = value

    def __call__(self, dims, dtype=torch.float32, device=None, *, in_dims=None, out_dims=None, generator=None):
        return torch.full(_shape(dims, "dimtorch.nn.init.Constant"), self.value, dtype=dtype, device=device)


class Zeros(Constant):
    def __init__(self):
        super().__init__(0.0)


class Ones(Constant):
    def __init__(self):
        super().__init__(1.0)


class Normal(Initializer):
    def __init__(self, stddev: float = 1.0, mean: float = 0.0):
        self.stddev, self.mean = stddev, mean

    def __call__(self, dims, dtype=torch.float32, device=None, *, in_dims=None, out_dims=None, generator=None):
        raw = torch.empty(_shape(dims, "dimtorch.nn.init.Normal"), dtype=dtype, device=device)
        return raw.normal_(self.mean, self.stddev, generator=generator)


class TruncatedNormal(Initializer):
    """Normal(mean, stddev) truncated to mean ± 2 stddev (torch.nn.init.trunc_normal_)."""

    def __init__(self, stddev: float = 1.0, mean: float = 0.0):
        self.stddev, self.mean = stddev, mean

    def __call__(self, dims, dtype=torch.float32, device=None, *, in_dims=None, out_dims=None, generator=None):
        raw = torch.empty(_shape(dims, "dimtorch.nn.init.TruncatedNormal"), dtype=dtype, device=device)
        return torch.nn.init.trunc_normal_(raw, self.mean, self.stddev, self.mean - 2 * self.stddev,
                                           self.mean + 2 * self.stddev, generator=generator)


class Uniform(Initializer):
    def __init__(self, minval: float = 0.0, maxval: float = 1.0):
        self.minval, self.maxval = minval, maxval

    def __call__(self, dims, dtype=torch.float32, device=None, *, in_dims=None, out_dims=None, generator=None):
        raw = torch.empty(_shape(dims, "dimtorch.nn.init.Uniform"), dtype=dtype, device=device)
        return raw.uniform_(self.minval, self.maxval, generator=generator)


class VarianceScaling(Initializer):
    """Values of variance `scale / n`, n = fan_in, fan_out or their mean (`mode`): `distribution`
    "uniform" (limit sqrt(3 scale / n)), "normal" (stddev sqrt(scale / n)) or "truncated_normal"
    (truncated at 2 stddev, stddev corrected so that the variance is scale / n, as in TF/RETURNN)."""

    def __init__(self, scale: float = 1.0, mode: str = "fan_in", distribution: str = "truncated_normal"):
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError("dimtorch.nn.init.VarianceScaling(): mode must be fan_in, fan_out or fan_avg, "
                             f"got {mode!r}")
        if distribution not in ("uniform", "normal", "truncated_normal"):
            raise ValueError("dimtorch.nn.init.VarianceScaling(): distribution must be uniform, normal or "
                             f"truncated_normal, got {distribution!r}")
        self.scale, self.mode, self.distribution = scale, mode, distribution

    def __call__(self, dims, dtype=torch.float32, device=None, *, in_dims=None, out_dims=None, generator=None):
        caller = f"dimtorch.nn.init.{type(self).__name__}"
        fan_in, fan_out = compute_fans(dims, in_dims, out_dims)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[self.mode]
        var = self.scale / max(1.0, n)
        raw = torch.empty(_shape(dims, caller), dtype=dtype, device=device)
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * var)
            return raw.uniform_(-limit, limit, generator=generator)
        if self.distribution == "normal":
            return raw.normal_(0.0, math.sqrt(var), generator=generator)
        std = math.sqrt(var) / 0.87962566103423978  # stddev of a unit normal truncated at ±2
        return torch.nn.init.trunc_normal_(raw, 0.0, std, -2 * std, 2 * std, generator=generator)


class GlorotUniform(VarianceScaling):
    """Glorot/Xavier uniform: limit sqrt(6 / (fan_in + fan_out)) (torch.nn.init.xavier_uniform_)."""

    def __init__(self, scale: float = 1.0):
        super().__init__(scale, "fan_avg", "uniform")


class GlorotNormal(VarianceScaling):
    """Glorot/Xavier normal: stddev sqrt(2 / (fan_in + fan_out)) (torch.nn.init.xavier_normal_)."""

    def __init__(self, scale: float = 1.0):
        super().__init__(scale, "fan_avg", "normal")


class HeNormal(VarianceScaling):
    """He/Kaiming normal: stddev sqrt(2 / fan_in) (torch.nn.init.kaiming_normal_ with relu gain)."""

    def __init__(self, scale: float = 2.0):
        super().__init__(scale, "fan_in", "normal")


class HeUniform(VarianceScaling):
    """He/Kaiming uniform: limit sqrt(6 / fan_in) (torch.nn.init.kaiming_uniform_ with relu gain)."""

    def __init__(self, scale: float = 2.0):
        super().__init__(scale, "fan_in", "uniform")


Glorot = XavierUniform = GlorotUniform
XavierNormal = GlorotNormal
He = KaimingNormal = HeNormal
KaimingUniform = HeUniform
