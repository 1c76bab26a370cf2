"""rf.encoder.base (RETURNN frontend's encoder interfaces): IEncoder (x -> y), ISeqFramewiseEncoder (x, spatial_dim)
-> y, ISeqDownsamplingEncoder (x, in_spatial_dim) -> (y, out_spatial_dim), with `out_dim` (and
`downsample_factor`)."""
from __future__ import annotations

from typing import Tuple, Union

from ..._C import Dim, Tensor
from ..module import Module

__all__ = ["IEncoder", "ISeqFramewiseEncoder", "ISeqDownsamplingEncoder"]


class IEncoder(Module):
    """An encoder x -> y over the feature dim `out_dim`."""

    out_dim: Dim

    def __call__(self, source: Tensor) -> Tensor:
        raise NotImplementedError


class ISeqFramewiseEncoder(Module):
    """A sequence encoder keeping the sequence's length: (source, *, spatial_dim) -> Tensor."""

    out_dim: Dim

    def __call__(self, source: Tensor, *, spatial_dim: Dim) -> Tensor:
        raise NotImplementedError


class ISeqDownsamplingEncoder(Module):
    """A sequence encoder that shortens the sequence (by about `downsample_factor`): (source, *, in_spatial_dim)
    -> (out, out_spatial_dim)."""

    out_dim: Dim
    downsample_factor: Union[int, float]

    def __call__(self, source: Tensor, *, in_spatial_dim: Dim) -> Tuple[Tensor, Dim]:
        raise NotImplementedError
