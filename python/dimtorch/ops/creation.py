"""Creation of Tensors over dims: zeros, ones and full (their C++ fast paths in src/ops/creation.cpp), and the
Python-only *_like, random_*, range_over_dim and convert_to_tensor."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from .._C import Dim, Tensor
from .._core import default_device as _default_device, sizes as _sizes
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
    raw = make(shape, dtype=torch_dtype, device=device if device is not None else _default_device.get())
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


@names_errors("dimtorch.constant()")
def constant(fill_value, *, dims, dtype=None, device=None, sparse_dim=None, feature_dim=None) -> Tensor:
    """full(dims, fill_value, ...) with RETURNN frontend's order: the value first, dims by keyword."""
    return _create(lambda shape, **kw: torch.full(shape, fill_value, **kw), dims, dtype, device, sparse_dim,
                   feature_dim, "dimtorch.constant()")


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
def zeros_like(x: Tensor, /, *, dtype=None) -> Tensor:
    """Zeros with the dims (and raw sizes), dtype and device of `x`."""
    return _like(x, 0, dtype, "dimtorch.zeros_like()")


@names_errors("dimtorch.ones_like()")
def ones_like(x: Tensor, /, *, dtype=None) -> Tensor:
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


def _random_dtype(dtype, sparse_dim, caller: str) -> torch.dtype:
    """dtype None: int64 (dimtorch's index dtype) with a sparse_dim, else torch's default float dtype."""
    if dtype is None:
        return torch.int64 if sparse_dim is not None else torch.get_default_dtype()
    return to_torch_dtype(dtype, caller)


def _check_sparse_dim(sparse_dim, caller: str) -> None:
    if sparse_dim is not None and not isinstance(sparse_dim, Dim):
        raise TypeError(f"{caller}: sparse_dim must be a Dim or None, got {tp_name(sparse_dim)}")


@names_errors("dimtorch.random_uniform()")
def random_uniform(dims: DimsArg, *, dtype=None, device=None, sparse_dim=None, feature_dim=None, minval=None,
                   maxval=None, seed=None, generator: Optional[torch.Generator] = None) -> Tensor:
    """Uniform values in [minval, maxval) over `dims` (RETURNN frontend's signature and defaults):
    minval None is 0; maxval None is the size of `sparse_dim` for an integer dtype with a static
    sparse_dim (uniform over its indices), else 1. dtype None: int64 with a sparse_dim, else torch's
    default float dtype. An integer dtype draws integers (Tensor.random_). `seed` or `generator`
    make it repeatable. While tracing, a dynamic dim's padded size is the one bound in the trace
    (dimtorch._core.sizes)."""
    caller = "dimtorch.random_uniform()"
    dims = dims_arg(dims, caller, "dims")
    _check_sparse_dim(sparse_dim, caller)
    shape, torch_dtype = _shape(dims, caller), _random_dtype(dtype, sparse_dim, caller)
    integer = not (torch_dtype.is_floating_point or torch_dtype.is_complex) and torch_dtype != torch.bool
    if minval is None:
        minval = 0
    if maxval is None:
        maxval = sparse_dim.size if integer and sparse_dim is not None and sparse_dim.size is not None else 1
    for name, v in (("minval", minval), ("maxval", maxval)):
        if isinstance(v, (Tensor, torch.Tensor)):
            raise TypeError(f"{caller}: {name} must be a Python number (a Tensor bound is not supported), got "
                            f"{tp_name(v)}")
    if device is None:
        device = _default_device.get()
    with naming_errors(caller):  # device, bounds, seed and generator go to torch as they are
        raw = torch.empty(shape, dtype=torch_dtype, device=device)
        g = _generator(seed, generator, device, caller)
        if integer:
            raw.random_(int(minval), int(maxval), generator=g)
        else:
            raw.uniform_(minval, maxval, generator=g)
    return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim)


@names_errors("dimtorch.random_normal()")
def random_normal(dims: DimsArg, *, dtype=None, device=None, sparse_dim=None, feature_dim=None, mean=0.0,
                  stddev=1.0, seed=None, generator: Optional[torch.Generator] = None) -> Tensor:
    """Normal values N(mean, stddev²) over `dims` (RETURNN frontend's signature; dtype None: torch's
    default float dtype); `seed` or `generator` make it repeatable. While tracing, a dynamic
    dim's padded size is the one bound in the trace (dimtorch._core.sizes)."""
    caller = "dimtorch.random_normal()"
    dims = dims_arg(dims, caller, "dims")
    _check_sparse_dim(sparse_dim, caller)
    shape, torch_dtype = _shape(dims, caller), _random_dtype(dtype, None, caller)
    if device is None:
        device = _default_device.get()
    with naming_errors(caller):  # device, mean, stddev, seed and generator go to torch as they are
        raw = torch.empty(shape, dtype=torch_dtype, device=device)
        raw.normal_(mean, stddev, generator=_generator(seed, generator, device, caller))
    return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim)


@names_errors("dimtorch.random_truncated_normal()")
def random_truncated_normal(dims: DimsArg, *, dtype=None, device=None, sparse_dim=None, feature_dim=None, mean=0.0,
                            stddev=1.0, minval=None, maxval=None, seed=None,
                            generator: Optional[torch.Generator] = None) -> Tensor:
    """Normal values N(mean, stddev²) over `dims`, redrawn into [minval, maxval] (default: mean -+ 2 stddev,
    RETURNN's), by the inverse of the normal CDF on uniform values in the CDF's range (the draw of
    torch.nn.init.trunc_normal_, written out so that torch.compile traces it); `seed` or `generator` make it
    repeatable."""
    caller = "dimtorch.random_truncated_normal()"
    dims = dims_arg(dims, caller, "dims")
    _check_sparse_dim(sparse_dim, caller)
    shape, torch_dtype = _shape(dims, caller), _random_dtype(dtype, None, caller)
    low = mean - 2.0 * stddev if minval is None else minval
    high = mean + 2.0 * stddev if maxval is None else maxval
    if not low < high:
        raise ValueError(f"{caller}: minval must be below maxval, got [{low}, {high}]")
    if device is None:
        device = _default_device.get()
    cdf_low, cdf_high = _normal_cdf((low - mean) / stddev), _normal_cdf((high - mean) / stddev)
    with naming_errors(caller):  # device, bounds, seed and generator go to torch as they are
        raw = torch.empty(shape, dtype=torch_dtype, device=device)
        raw.uniform_(2 * cdf_low - 1, 2 * cdf_high - 1, generator=_generator(seed, generator, device, caller))
        raw = raw.erfinv_().mul_(stddev * math.sqrt(2.0)).add_(mean).clamp_(min=low, max=high)
    return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim)


def _normal_cdf(x: float) -> float:
    return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0


def range_over_dim(dim: Dim, *, dtype=None, device=None) -> Tensor:
    """0, 1, ..., size-1 over `dim` (its max size for a dynamic dim), with sparse_dim `dim` for an
    integer dtype (a float range indexes nothing: no sparse_dim, as RETURNN frontend); dtype None is
    int64. While tracing, a dynamic dim's
    max size is its padded size in the trace."""
    caller = "dimtorch.range_over_dim()"
    if not isinstance(dim, Dim):
        raise TypeError(f"{caller}: expected a Dim, got {type(dim).__name__}")
    (size,) = _shape((dim,), caller)
    torch_dtype = to_torch_dtype(dtype, caller) if dtype is not None else torch.int64
    if device is None:
        device = _default_device.get()
    with naming_errors(caller):  # the device goes to torch as it is
        raw = torch.arange(size, dtype=torch_dtype, device=device)
    if torch_dtype.is_floating_point or torch_dtype.is_complex or torch_dtype is torch.bool:
        return Tensor(raw, (dim,))
    return Tensor(raw, (dim,), sparse_dim=dim)


@names_errors("dimtorch.convert_to_tensor()")
def convert_to_tensor(value, *, dims: Optional[DimsArg] = None, dtype=None, sparse_dim=None, feature_dim=None,
                      shape: Optional[DimsArg] = None, device=None, keep_scalar_on_cpu: bool = False,
                      name: Optional[str] = None, _backend=None) -> Tensor:
    """A Tensor from a Tensor (returned as is), torch.Tensor, number, list or numpy array, over
    `dims` (or `shape`, RETURNN frontend's other name for it; None: no dims, for a scalar). `name`
    names the new Tensor. `device` None: the default device (dimtorch.rf.set_default_device, else
    torch's), except for a Python scalar with keep_scalar_on_cpu; a torch.Tensor stays where it is.
    _backend (RETURNN frontend's) is ignored."""
    caller = "dimtorch.convert_to_tensor()"
    if isinstance(value, Tensor):
        return value
    if shape is not None:
        if dims is not None:
            raise TypeError(f"{caller}: give dims or shape, not both")
        dims = shape
    dims = dims_arg(dims if dims is not None else (), caller, "dims")
    if device is None and not isinstance(value, torch.Tensor) and not (
            keep_scalar_on_cpu and isinstance(value, (int, float, bool, complex))):
        device = _default_device.get()  # (a scalar kept on the CPU where asked)
    try:
        raw = torch.as_tensor(value, dtype=to_torch_dtype(dtype, caller), device=device)
    except (TypeError, ValueError, RuntimeError, OverflowError) as e:
        raise type(e)(f"{caller}: cannot make a tensor of {type(value).__name__}: {e}") from None
    if name is not None:
        return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim, name=name)
    return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim)
