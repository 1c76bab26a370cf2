"""rf.Conv1d/2d/3d and rf.TransposedConv1d/2d/3d (RETURNN frontend's, with its parameter names and layouts):
`filter` (out_dim, in_dim // groups, *filter_size) for conv, (in_dim, out_dim, *filter_size) for transposed
conv (torch's layouts, what F.conv* take as they are), `bias` (out_dim,); Glorot, zeros. They run
dt.conv / dt.transposed_conv (padding of shorter sequences seen as zeros; output lengths by dim math).

Conv1d and TransposedConv1d are called as (source, *, in_spatial_dim, out_spatial_dim=None) -> (out, dim),
the others as (source, *, in_spatial_dims, out_spatial_dims=None) -> (out, [dims])."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

from .. import _C
from .._C import Dim, Tensor
from .._core.args import dim_str, dims_str
from . import init as _init
from ._functional import (  # noqa: F401  (RETURNN's rf.conv module has the functions too)
    calc_conv_out_length, calc_transposed_conv_out_length, conv, make_conv_out_spatial_dims,
    make_transposed_conv_out_spatial_dims, max_pool, max_pool1d, pool, pool1d, pool2d, pool3d, transposed_conv,
)
from .module import Module
from .parameter import Parameter

__all__ = [
    "Conv1d", "Conv2d", "Conv3d", "TransposedConv1d", "TransposedConv2d", "TransposedConv3d",
    "conv", "transposed_conv", "pool", "max_pool", "max_pool1d", "pool1d", "pool2d", "pool3d",
    "make_conv_out_spatial_dims", "calc_conv_out_length", "make_transposed_conv_out_spatial_dims",
    "calc_transposed_conv_out_length",
]


def _filter_dims(nd: int, filter_size, caller: str) -> List[Dim]:
    if isinstance(filter_size, (int, Dim)):
        filter_size = [filter_size] * nd
    filter_size = list(filter_size)
    if len(filter_size) != nd:
        raise ValueError(f"{caller}: filter_size must have {nd} entries, got {filter_size!r}")
    out = []
    for i, s in enumerate(filter_size):
        if isinstance(s, Dim):
            out.append(s)
        elif isinstance(s, int) and not isinstance(s, bool) and s >= 1:
            out.append(Dim(s, name=f"filter-dim{i}"))
        else:
            raise ValueError(f"{caller}: filter_size entries must be ints >= 1 or static Dims, got {s!r}")
    return out


def _check_source(module, source, in_dim: Dim) -> None:
    if not isinstance(source, Tensor) or in_dim not in source.dims:
        got = dims_str(source.dims) if isinstance(source, Tensor) else type(source).__name__
        raise ValueError(f"{type(module).__name__}(): source must be a Tensor with the in_dim {dim_str(in_dim)} "
                         f"(got {got})")


class _Conv(Module):
    nd = 0

    def __init__(self, in_dim: Dim, out_dim: Dim, filter_size: Union[Sequence[Union[int, Dim]], int, Dim], *,
                 padding: str, strides: Optional[Union[int, Sequence[int]]] = None,
                 dilation_rate: Optional[Union[int, Sequence[int]]] = None, groups: Optional[int] = None,
                 with_bias: bool = True):
        super().__init__()
        caller = f"dimtorch.rf.{type(self).__name__}()"
        if not isinstance(in_dim, Dim) or not isinstance(out_dim, Dim):
            raise TypeError(f"{caller}: in_dim and out_dim must be Dims")
        self.in_dim, self.out_dim = in_dim, out_dim
        self.filter_size = _filter_dims(self.nd, filter_size, caller)
        self.padding, self.groups = padding, groups
        self.strides = [strides] * self.nd if isinstance(strides, int) else strides
        self.dilation_rate = dilation_rate
        g = groups or 1
        if g < 1 or in_dim.size % g or out_dim.size % g:
            raise ValueError(f"{caller}: groups={groups} must divide in_dim {dim_str(in_dim)} and out_dim {dim_str(out_dim)}")
        filter_in = in_dim // g if g > 1 else in_dim
        if filter_in is out_dim:  # one Tensor cannot name a dim twice: the filter's input channels get a copy
            filter_in = Dim(filter_in.size, name=f"{in_dim.name}_in")
        self.filter_in_dim = filter_in
        self.filter = Parameter([out_dim, filter_in] + self.filter_size)
        self.filter.initial = _init.Glorot()
        self.with_bias = with_bias
        self.bias = None
        if with_bias:
            self.bias = Parameter([out_dim])
            self.bias.initial = 0.0

    def _run(self, source, in_spatial_dims, out_spatial_dims, padding_zeroed: bool = False):
        if not isinstance(source, Tensor) or self.in_dim not in source.dims:
            _check_source(self, source, self.in_dim)
        return _C.conv(source, self.filter, in_dim=self.in_dim, out_dim=self.out_dim,
                     in_spatial_dims=tuple(in_spatial_dims),
                     out_spatial_dims=tuple(out_spatial_dims) if out_spatial_dims is not None else None,
                     filter_size=self.filter_size, strides=self.strides if self.strides is not None else 1,
                     dilation=self.dilation_rate if self.dilation_rate is not None else 1, padding=self.padding,
                     groups=self.groups or 1, bias=self.bias, padding_zeroed=padding_zeroed)

    def extra_repr(self) -> str:
        return (f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}, "
                f"filter_size={[d.size for d in self.filter_size]}, padding={self.padding!r}")


class Conv1d(_Conv):
    """1-D convolution: (source, *, in_spatial_dim, out_spatial_dim=None) -> (out, out_spatial_dim)."""

    nd = 1

    def __call__(self, source: Tensor, *, in_spatial_dim: Dim, out_spatial_dim: Optional[Dim] = None
                 ) -> Tuple[Tensor, Dim]:
        y, (out,) = self._run(source, (in_spatial_dim,), None if out_spatial_dim is None else (out_spatial_dim,))
        return y, out


class Conv2d(_Conv):
    """2-D convolution: (source, *, in_spatial_dims, out_spatial_dims=None) -> (out, [out spatial dims])."""

    nd = 2

    def __call__(self, source: Tensor, *, in_spatial_dims: Sequence[Dim],
                 out_spatial_dims: Optional[Sequence[Dim]] = None) -> Tuple[Tensor, List[Dim]]:
        y, dims = self._run(source, in_spatial_dims, out_spatial_dims)
        return y, list(dims)


class Conv3d(Conv2d):
    """3-D convolution: (source, *, in_spatial_dims, out_spatial_dims=None) -> (out, [out spatial dims])."""

    nd = 3


class _TransposedConv(Module):
    nd = 0

    def __init__(self, in_dim: Dim, out_dim: Dim, filter_size: Union[Sequence[Union[int, Dim]], int, Dim], *,
                 padding: str, remove_padding: Union[Sequence[int], int] = 0,
                 output_padding: Optional[Union[Sequence[Optional[int]], int]] = None,
                 strides: Optional[Union[int, Sequence[int]]] = None, with_bias: bool = True):
        super().__init__()
        caller = f"dimtorch.rf.{type(self).__name__}()"
        if not isinstance(in_dim, Dim) or not isinstance(out_dim, Dim):
            raise TypeError(f"{caller}: in_dim and out_dim must be Dims")
        self.in_dim, self.out_dim = in_dim, out_dim
        self.filter_size = _filter_dims(self.nd, filter_size, caller)
        self.padding, self.remove_padding, self.output_padding = padding, remove_padding, output_padding
        self.strides = [strides] * self.nd if isinstance(strides, int) else strides
        filter_out = out_dim if out_dim is not in_dim else Dim(out_dim.size, name=f"{out_dim.name}_out")
        self.filter_out_dim = filter_out
        self.filter = Parameter([in_dim, filter_out] + self.filter_size)
        self.filter.initial = _init.Glorot()
        self.with_bias = with_bias
        self.bias = None
        if with_bias:
            self.bias = Parameter([out_dim])
            self.bias.initial = 0.0

    def _run(self, source, in_spatial_dims, out_spatial_dims):
        if not isinstance(source, Tensor) or self.in_dim not in source.dims:
            _check_source(self, source, self.in_dim)
        return _C.transposed_conv(source, self.filter, in_dim=self.in_dim, out_dim=self.out_dim,
                                in_spatial_dims=tuple(in_spatial_dims),
                                out_spatial_dims=tuple(out_spatial_dims) if out_spatial_dims is not None else None,
                                filter_size=self.filter_size, strides=self.strides, padding=self.padding,
                                remove_padding=self.remove_padding, output_padding=self.output_padding,
                                bias=self.bias)

    def extra_repr(self) -> str:
        return (f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}, "
                f"filter_size={[d.size for d in self.filter_size]}, padding={self.padding!r}")


class TransposedConv1d(_TransposedConv):
    """1-D transposed convolution: (source, *, in_spatial_dim, out_spatial_dim=None) -> (out, out_spatial_dim)."""

    nd = 1

    def __call__(self, source: Tensor, *, in_spatial_dim: Dim, out_spatial_dim: Optional[Dim] = None
                 ) -> Tuple[Tensor, Dim]:
        y, (out,) = self._run(source, (in_spatial_dim,), None if out_spatial_dim is None else (out_spatial_dim,))
        return y, out


class TransposedConv2d(_TransposedConv):
    """2-D transposed convolution: (source, *, in_spatial_dims, out_spatial_dims=None) -> (out, [dims])."""

    nd = 2

    def __call__(self, source: Tensor, *, in_spatial_dims: Sequence[Dim],
                 out_spatial_dims: Optional[Sequence[Dim]] = None) -> Tuple[Tensor, List[Dim]]:
        y, dims = self._run(source, in_spatial_dims, out_spatial_dims)
        return y, list(dims)


class TransposedConv3d(TransposedConv2d):
    """3-D transposed convolution: (source, *, in_spatial_dims, out_spatial_dims=None) -> (out, [dims])."""

    nd = 3
