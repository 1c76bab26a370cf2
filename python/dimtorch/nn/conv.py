"""Convolution layers: Conv1d, Conv2d, Conv3d (dt.conv), TransposedConv1d, TransposedConv2d, TransposedConv3d
(dt.transposed_conv)."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

from .. import _C
from .._C import Dim, Tensor
from ..ops.conv import transposed_conv
from .._core.args import dim_str
from . import init as _init
from .linear import check_in_dim
from .module import Module, Parameter


def _init_common(module: Module, in_dim: Dim, out_dim: Dim, filter_size, groups: int) -> None:
    """Checks and sets in_dim, out_dim, groups and the filter dims (static Dims made from ints)."""
    name, n = type(module).__name__, module._n
    if isinstance(filter_size, int):
        filter_size = (filter_size,) * n
    filter_size = tuple(filter_size)
    if len(filter_size) != n or not all(isinstance(k, int) and k >= 1 for k in filter_size):
        raise ValueError(f"{name}(): filter_size must be {n} ints >= 1, got {filter_size!r}")
    if groups < 1 or in_dim.size % groups or out_dim.size % groups:
        raise ValueError(f"{name}(): groups={groups} does not divide in_dim {dim_str(in_dim)} and out_dim "
                         f"{dim_str(out_dim)}")
    module.in_dim, module.out_dim, module.groups = in_dim, out_dim, groups
    module.filter_dims = tuple(Dim(k, name=f"{name.lower()}_filter{i}") for i, k in enumerate(filter_size))


class _Conv(Module):
    """Convolution of in_dim to out_dim over `n` spatial dims given at call time (dt.conv).

    Weight dims (out_dim, filter_in_dim, *filter dims), filter_in_dim = in_dim // groups (in_dim
    itself for groups=1; a copy of it when out_dim is in_dim): torch's layout, so a torch Conv's state
    dict loads as is; bias (out_dim,), zeros. Glorot uniform init with fans from the dims."""

    _n = 0

    def __init__(self, in_dim: Dim, out_dim: Dim, filter_size: Union[int, Sequence[int]], *,
                 padding: Union[str, int, Sequence[int]] = "valid", strides: Union[int, Sequence[int]] = 1,
                 dilation: Union[int, Sequence[int]] = 1, groups: int = 1, with_bias: bool = True,
                 dtype="float32", device=None):
        super().__init__()
        _init_common(self, in_dim, out_dim, filter_size, groups)
        self.padding, self.strides, self.dilation = padding, strides, dilation
        self.filter_in_dim = in_dim if groups == 1 else in_dim // groups
        if self.filter_in_dim is out_dim:  # a filter cannot name one dim twice: its input channels get a copy
            self.filter_in_dim = Dim(in_dim.size, name=f"{in_dim.name}_in")
        self.weight = Parameter((out_dim, self.filter_in_dim) + self.filter_dims, dtype, init=_init.Glorot(),
                                device=device, in_dims=(self.filter_in_dim,), out_dims=(out_dim,))
        self.bias = Parameter((out_dim,), dtype, init=0.0, device=device) if with_bias else None

    def _conv(self, x: Tensor, in_spatial_dims, out_spatial_dims) -> Tuple[Tensor, tuple]:
        if not isinstance(x, Tensor) or self.in_dim not in x.dims:
            check_in_dim(self, x, self.in_dim)
        return _C.conv(x, self.weight, in_dim=self.in_dim, out_dim=self.out_dim, in_spatial_dims=in_spatial_dims,
                       out_spatial_dims=out_spatial_dims, filter_size=self.filter_dims, strides=self.strides,
                       dilation=self.dilation, padding=self.padding, groups=self.groups, bias=self.bias)

    def extra_repr(self) -> str:
        return (f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}, "
                f"filter_size={tuple(d.size for d in self.filter_dims)}, padding={self.padding!r}, "
                f"strides={self.strides}, groups={self.groups}")


class Conv1d(_Conv):
    """1-D convolution over one spatial dim; `forward(x, in_spatial_dim=, out_spatial_dim=None)` returns
    (y, out_spatial_dim). Output dims: x's other dims, out_dim, out_spatial_dim; lengths by dim math (see
    dt.conv; a given out_spatial_dim is checked against them)."""

    _n = 1

    def forward(self, x: Tensor, *, in_spatial_dim: Dim, out_spatial_dim: Optional[Dim] = None) -> Tuple[Tensor, Dim]:
        y, (out_spatial,) = self._conv(x, (in_spatial_dim,), None if out_spatial_dim is None else (out_spatial_dim,))
        return y, out_spatial


class Conv2d(_Conv):
    """2-D convolution over two spatial dims; `forward(x, in_spatial_dims=, out_spatial_dims=None)` returns
    (y, out_spatial_dims)."""

    _n = 2

    def forward(self, x: Tensor, *, in_spatial_dims: Sequence[Dim],
                out_spatial_dims: Optional[Sequence[Dim]] = None) -> Tuple[Tensor, tuple]:
        return self._conv(x, tuple(in_spatial_dims), out_spatial_dims)


class Conv3d(_Conv):
    """3-D convolution over three spatial dims; `forward(x, in_spatial_dims=, out_spatial_dims=None)` returns
    (y, out_spatial_dims)."""

    _n = 3

    def forward(self, x: Tensor, *, in_spatial_dims: Sequence[Dim],
                out_spatial_dims: Optional[Sequence[Dim]] = None) -> Tuple[Tensor, tuple]:
        return self._conv(x, tuple(in_spatial_dims), out_spatial_dims)


class _TransposedConv(Module):
    """Transposed convolution of in_dim to out_dim over `n` spatial dims given at call time
    (dt.transposed_conv; output lengths and the meaning of padding, remove_padding and
    output_padding there). `strides` defaults to the filter size, as in RETURNN.

    Weight dims (in_dim, filter_out_dim, *filter dims), filter_out_dim = out_dim // groups (a copy of
    out_dim when it is in_dim): torch's ConvTranspose layout, so its
    state dict loads as is; bias (out_dim,), zeros. Glorot uniform init with fans from the dims."""

    _n = 0

    def __init__(self, in_dim: Dim, out_dim: Dim, filter_size: Union[int, Sequence[int]], *,
                 padding: str = "valid", strides: Optional[Union[int, Sequence[int]]] = None,
                 dilation: Union[int, Sequence[int]] = 1, groups: int = 1,
                 remove_padding: Union[int, Sequence[int]] = 0,
                 output_padding: Optional[Union[int, Sequence[Optional[int]]]] = None, with_bias: bool = True,
                 dtype="float32", device=None):
        super().__init__()
        _init_common(self, in_dim, out_dim, filter_size, groups)
        self.padding, self.strides, self.dilation = padding, strides, dilation
        self.remove_padding, self.output_padding = remove_padding, output_padding
        self.filter_out_dim = out_dim if groups == 1 else out_dim // groups
        if self.filter_out_dim is in_dim:  # a filter cannot name one dim twice: its output channels get a copy
            self.filter_out_dim = Dim(out_dim.size, name=f"{out_dim.name}_out")
        self.weight = Parameter((in_dim, self.filter_out_dim) + self.filter_dims, dtype, init=_init.Glorot(),
                                device=device, in_dims=(in_dim,), out_dims=(self.filter_out_dim,))
        self.bias = Parameter((out_dim,), dtype, init=0.0, device=device) if with_bias else None

    def _transposed_conv(self, x: Tensor, in_spatial_dims, out_spatial_dims) -> Tuple[Tensor, tuple]:
        if not isinstance(x, Tensor) or self.in_dim not in x.dims:
            check_in_dim(self, x, self.in_dim)
        return transposed_conv(x, self.weight, in_dim=self.in_dim, out_dim=self.out_dim,
                               in_spatial_dims=in_spatial_dims, out_spatial_dims=out_spatial_dims, filter_size=self.filter_dims, strides=self.strides,
                               dilation=self.dilation, padding=self.padding, remove_padding=self.remove_padding,
                               output_padding=self.output_padding, groups=self.groups, bias=self.bias)

    def extra_repr(self) -> str:
        return (f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}, "
                f"filter_size={tuple(d.size for d in self.filter_dims)}, padding={self.padding!r}, "
                f"strides={self.strides}, groups={self.groups}")


class TransposedConv1d(_TransposedConv):
    """1-D transposed convolution over one spatial dim; `forward(x, in_spatial_dim=, out_spatial_dim=None)`
    returns (y, out_spatial_dim). Output dims: x's other dims, out_dim, out_spatial_dim."""

    _n = 1

    def forward(self, x: Tensor, *, in_spatial_dim: Dim, out_spatial_dim: Optional[Dim] = None) -> Tuple[Tensor, Dim]:
        y, (out_spatial,) = self._transposed_conv(x, (in_spatial_dim,),
                                                  None if out_spatial_dim is None else (out_spatial_dim,))
        return y, out_spatial


class TransposedConv2d(_TransposedConv):
    """2-D transposed convolution over two spatial dims; `forward(x, in_spatial_dims=, out_spatial_dims=None)`
    returns (y, out_spatial_dims)."""

    _n = 2

    def forward(self, x: Tensor, *, in_spatial_dims: Sequence[Dim],
                out_spatial_dims: Optional[Sequence[Dim]] = None) -> Tuple[Tensor, tuple]:
        return self._transposed_conv(x, tuple(in_spatial_dims), out_spatial_dims)


class TransposedConv3d(_TransposedConv):
    """3-D transposed convolution over three spatial dims; `forward(x, in_spatial_dims=, out_spatial_dims=None)`
    returns (y, out_spatial_dims)."""

    _n = 3

    def forward(self, x: Tensor, *, in_spatial_dims: Sequence[Dim],
                out_spatial_dims: Optional[Sequence[Dim]] = None) -> Tuple[Tensor, tuple]:
        return self._transposed_conv(x, tuple(in_spatial_dims), out_spatial_dims)


__all__ = ["Conv1d", "Conv2d", "Conv3d", "TransposedConv1d", "TransposedConv2d", "TransposedConv3d"]
