"""Creation of Tensors over dims: zeros, ones and full (their C++ fast paths in src/ops/creation.cpp), and the
Python-only *_like, random_*, range_over_dim and convert_to_tensor."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from .._C import Dim, Tensor
from .._core import sizes as _sizes
from .._core.args import dim_str, dims_arg
from .._core.dtypes import dtype_from, to_torch_dtype
from .._core.errors import naming_errors
from ._support import MAX_DIMS, describe_dims, dims_tuple, index_of, names_errors, padded_size, tp_name


def _create(make, dims, dtype, device, sparse_dim, feature_dim, caller: str) -> Tensor:
    """A new Tensor over `dims` (max sizes of dynamic dims): make(shape, dtype=, device=)."""
    dims = dims_tuple(dims, caller, "dims")
    if len(dims) > MAX_DIMS:
        raise ValueError(f"{caller}: at most {MAX_DIMS} dims are supported, got {len(dims)}")
    shape = []
    for i, d in enumerate(dims):
        if index_of(dims[:i], d) >= 0:
            raise ValueError(f"{caller}: dim {dim_str(d)} appears twice (dims: {describe_dims(dims)})")
        shape.append(padded_size(d, caller, dims))
    if sparse_dim is not None and not isinstance(sparse_dim, Dim):
        raise TypeError(f"{caller}: sparse_dim must be a Dim or None, got {tp_name(sparse_dim)}")
    if feature_dim is not None and (not isinstance(feature_dim, Dim) or index_of(dims, feature_dim) < 0):
        shown = dim_str(feature_dim) if isinstance(feature_dim, Dim) else str(feature_dim)
        raise ValueError(f"{caller}: feature_dim must be one of the dims ({describe_dims(dims)}), got {shown}")
    torch_dtype = dtype_from(dtype, caller) if dtype is not None else None
    raw = make(shape, dtype=torch_dtype, device=device)
    return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim)


@names_errors("dimtorch.zeros()")
def zeros(dims, *, dtype=None, device=None, sparse_dim=None, feature_dim=None) -> Tensor:
    """Zeros over `dims` (max sizes of dynamic dims); dtype None is torch's default dtype."""
    return _create(torch.zeros, dims, dtype, device, sparse_dim, feature_dim, "dimtorch.zeros()")


@names_errors("dimtorch.ones()")
def ones(dims, *, dtype=None, device=None, sparse_dim=None, feature_dim=None) -> Tensor:
    """Ones over `dims`; dtype None is torch's default dtype."""
    return _create(torch.ones, dims, dtype, device, sparse_dim, feature_dim, "dimtorch.ones()")


@names_errors("dimtorch.full()")
def full(dims, fill_value, *, dtype=None, device=None, sparse_dim=None, feature_dim=None) -> Tensor:
    """`fill_value` over `dims`; dtype None: as torch.full infers it from the fill value."""
    return _create(lambda shape, **kw: torch.full(shape, fill_value, **kw), dims, dtype, device, sparse_dim,
                   feature_dim, "dimtorch.full()")


DimsArg = Union[Dim, Sequence[Dim]]


def _shape(dims: tuple, caller: str) -> list:
    """Raw sizes of a new tensor over dims: max sizes eagerly, the sizes bound in the trace while tracing
    (dimtorch._core.sizes)."""
    return _sizes.padded_sizes(dims, caller)


def _like(x: Tensor, fill, dtype, caller: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{caller}: expected a dimtorch.Tensor, got {type(x).__name__}")
    raw = torch.full_like(x.raw, fill, dtype=to_torch_dtype(dtype, caller))
    return Tensor(raw, x.dims, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim)


@names_errors("dimtorch.zeros_like()")
def zeros_like(x: Tensor, *, dtype=None) -> Tensor:
    """Zeros with the dims (and raw sizes), dtype and device of `x`."""
    return _like(x, 0, dtype, "dimtorch.zeros_like()")


@names_errors("dimtorch.ones_like()")
def ones_like(x: Tensor, *, dtype=None) -> Tensor:
    """Ones with the dims (and raw sizes), dtype and device of `x`."""
    return _like(x, 1, dtype, "dimtorch.ones_like()")


def _generator(seed, generator, device, caller: str):
    if seed is not None and generator is not None:
        raise ValueError(f"{caller}: give either seed or generator, not both")
    if seed is None:
        return generator
    g = torch.Generator(device=device if device is not None else "cpu")
    g.manual_seed(int(seed))
    return g


@names_errors("dimtorch.random_uniform()")
def random_uniform(dims: DimsArg, *, minval=0.0, maxval=1.0, dtype="float32", device=None, seed=None,
                   generator: Optional[torch.Generator] = None, feature_dim=None) -> Tensor:
    """Uniform values in [minval, maxval) over `dims`; `seed` or `generator` make it repeatable."""
    caller = "dimtorch.random_uniform()"
    dims = dims_arg(dims, caller, "dims")
    shape, torch_dtype = _shape(dims, caller), to_torch_dtype(dtype, caller)
    with naming_errors(caller):  # device, bounds, seed and generator go to torch as they are
        raw = torch.empty(shape, dtype=torch_dtype, device=device)
        raw.uniform_(minval, maxval, generator=_generator(seed, generator, device, caller))
    return Tensor(raw, dims, feature_dim=feature_dim)


@names_errors("dimtorch.random_normal()")
def random_normal(dims: DimsArg, *, mean=0.0, stddev=1.0, dtype="float32", device=None, seed=None,
                  generator: Optional[torch.Generator] = None, feature_dim=None) -> Tensor:
    """Normal values N(mean, stddev²) over `dims`; `seed` or `generator` make it repeatable."""
    caller = "dimtorch.random_normal()"
    dims = dims_arg(dims, caller, "dims")
    shape, torch_dtype = _shape(dims, caller), to_torch_dtype(dtype, caller)
    with naming_errors(caller):  # device, mean, stddev, seed and generator go to torch as they are
        raw = torch.empty(shape, dtype=torch_dtype, device=device)
        raw.normal_(mean, stddev, generator=_generator(seed, generator, device, caller))
    return Tensor(raw, dims, feature_dim=feature_dim)


@names_errors("dimtorch.random_truncated_normal()")
def random_truncated_normal(dims: DimsArg, *, mean=0.0, stddev=1.0, minval=None, maxval=None, dtype="float32",
                            device=None, seed=None, generator: Optional[torch.Generator] = None,
                            feature_dim=None) -> Tensor:
    """Normal values N(mean, stddev²) over `dims`, redrawn into [minval, maxval] (default: mean -+ 2 stddev,
    RETURNN's), by the inverse of the normal CDF on uniform values in the CDF's range (the draw of
    torch.nn.init.trunc_normal_, written out so that torch.compile traces it); `seed` or `generator` make it
    repeatable."""
    caller = "dimtorch.random_truncated_normal()"
    dims = dims_arg(dims, caller, "dims")
    shape, torch_dtype = _shape(dims, caller), to_torch_dtype(dtype, caller)
    low = mean - 2.0 * stddev if minval is None else minval
    high = mean + 2.0 * stddev if maxval is None else maxval
    if not low < high:
        raise ValueError(f"{caller}: minval must be below maxval, got [{low}, {high}]")
    cdf_low, cdf_high = _normal_cdf((low - mean) / stddev), _normal_cdf((high - mean) / stddev)
    with naming_errors(caller):  # device, bounds, seed and generator go to torch as they are
        raw = torch.empty(shape, dtype=torch_dtype, device=device)
        raw.uniform_(2 * cdf_low - 1, 2 * cdf_high - 1, generator=_generator(seed, generator, device, caller))
        raw = raw.erfinv_().mul_(stddev * math.sqrt(2.0)).add_(mean).clamp_(min=low, max=high)
    return Tensor(raw, dims, feature_dim=feature_dim)


def _normal_cdf(x: float) -> float:
    return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0


def range_over_dim(dim: Dim, *, dtype="int64", device=None) -> Tensor:
    """0, 1, ..., size-1 over `dim` (its max size for a dynamic dim: while tracing, its padded size in
    the trace), with sparse_dim `dim`."""
    caller = "dimtorch.range_over_dim()"
    if not isinstance(dim, Dim):
        raise TypeError(f"{caller}: expected a Dim, got {type(dim).__name__}")
    (size,) = _shape((dim,), caller)
    torch_dtype = to_torch_dtype(dtype, caller)
    with naming_errors(caller):  # the device goes to torch as it is
        raw = torch.arange(size, dtype=torch_dtype, device=device)
    return Tensor(raw, (dim,), sparse_dim=dim)


@names_errors("dimtorch.convert_to_tensor()")
def convert_to_tensor(value, *, dims: DimsArg = (), dtype=None, device=None, sparse_dim=None,
                      feature_dim=None) -> Tensor:
    """A Tensor from a Tensor (returned as is), torch.Tensor, number, list or numpy array."""
    caller = "dimtorch.convert_to_tensor()"
    if isinstance(value, Tensor):
        return value
    dims = dims_arg(dims, caller, "dims")
    try:
        raw = torch.as_tensor(value, dtype=to_torch_dtype(dtype, caller), device=device)
    except (TypeError, ValueError, RuntimeError, OverflowError) as e:
        raise type(e)(f"{caller}: cannot make a tensor of {type(value).__name__}: {e}") from None
    return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim)
