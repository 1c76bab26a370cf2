"""The Python definition of the Tensor type: construction, derived properties, methods, operators.

dimtorch.Tensor is a C++ type (src/core/tensor.cpp) whose slots and methods are the eager fast paths.
What is defined here is its semantics in Python: torch.compile traces these functions in place of
the C++ ones (dimtorch._capture.compile installs them), make_fx and torch.export reach them through the
core when a raw is being traced, and the tests check the two against each other.
"""
from __future__ import annotations

import torch

from .._core import sizes as _sizes, tracing as _tracing
from .._C import Dim, Tensor
from .._core.dtypes import dtype_name
from .._core.args import dim_str, dims_arg, dims_str, namesakes_note
from .elementwise import TENSOR_OPERATORS

_CTOR = "dimtorch.Tensor()"


def __init__(self, raw, dims, *, sparse_dim=None, feature_dim=None, name=None):
    """Tensor(raw, dims, *, sparse_dim=None, feature_dim=None, name=None): checks raw against dims.

    While tracing, a dynamic dim's lengths are graph values: the raw's size of it is not checked
    against their max (the eager constructor does that on the host), and the first raw over a dim
    without a static size gives its size in the trace (dimtorch._core.sizes)."""
    if not isinstance(raw, torch.Tensor):
        raise TypeError(f"{_CTOR}: raw must be a torch.Tensor, got {type(raw).__name__}")
    dims = dims_arg(dims, _CTOR, "dims")
    if raw.dim() != len(dims):
        raise ValueError(f"{_CTOR}: raw has shape {tuple(raw.shape)} ({raw.dim()} axes) but {len(dims)} "
                         f"dims were given (dims: {dims_str(dims)})")
    for i, d in enumerate(dims):
        if d in dims[:i]:
            raise ValueError(f"{_CTOR}: dim {dim_str(d)} appears twice (dims: {dims_str(dims)})")
        if d.size is not None and raw.shape[i] != d.size:
            raise ValueError(f"{_CTOR}: dim {dim_str(d)} has raw size {raw.shape[i]} at axis {i} (raw "
                             f"shape {tuple(raw.shape)}, dims: {dims_str(dims)})")
        lengths = d._lengths
        if lengths is not None:
            for k, b in enumerate(lengths.dims):
                if b in dims and lengths.raw.shape[k] != raw.shape[dims.index(b)]:
                    raise ValueError(
                        f"{_CTOR}: dim {dim_str(d)} has lengths over {dim_str(b)} of size "
                        f"{lengths.raw.shape[k]}, but the raw has size {raw.shape[dims.index(b)]} there")
    if sparse_dim is not None and not isinstance(sparse_dim, Dim):
        raise TypeError(f"{_CTOR}: sparse_dim must be a Dim or None, got {type(sparse_dim).__name__}")
    if feature_dim is not None and (not isinstance(feature_dim, Dim) or feature_dim not in dims):
        raise ValueError(f"{_CTOR}: feature_dim must be one of the dims ({dims_str(dims)}), got "
                         f"{feature_dim!r}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"{_CTOR}: name must be a str or None, got {type(name).__name__}")
    if _tracing.tracing():
        _sizes.bind_tensor_dims(raw, dims)
    # Markers first: the core's setters take them only until raw and dims complete the Tensor.
    self.sparse_dim = sparse_dim
    self.feature_dim = feature_dim
    self.name = name
    self.dims = dims
    self.raw = raw


# ---- derived properties (the stored ones, raw/dims/sparse_dim/feature_dim/name, are C fields) --

def ndim(self) -> int:
    """Number of dims."""
    return len(self.dims)


def shape(self) -> tuple:
    """Raw sizes, one per dim."""
    return tuple(self.raw.shape)


def dtype(self) -> str:
    """dtype name, e.g. 'float32'."""
    return dtype_name(self.raw.dtype)


def device(self) -> torch.device:
    """torch.device of the raw."""
    return self.raw.device


def requires_grad(self) -> bool:
    """raw.requires_grad."""
    return self.raw.requires_grad


PROPERTIES = {"ndim": ndim, "shape": shape, "dtype": dtype, "device": device,
              "requires_grad": requires_grad}


# ---- methods ---------------------------------------------------------------------------------

def _keep(self, raw, dims) -> Tensor:
    """Tensor over dims with self's markers and name (dims holds all of self's dims)."""
    return Tensor(raw, dims, sparse_dim=self.sparse_dim, feature_dim=self.feature_dim, name=self.name)


def _check_target(self, target: tuple, caller: str) -> None:
    for i, d in enumerate(target):
        if d in target[:i]:
            raise ValueError(f"{caller}: dim {dim_str(d)} appears twice in the target dims")
    for d in self.dims:
        if d not in target:
            among = (self.dims, target)
            raise ValueError(f"{caller}: dim {dim_str(d, among)} of the tensor is not in the target dims "
                             f"({dims_str(target, among)}); tensor dims: {dims_str(self.dims, among)}"
                             f"{namesakes_note(*among)}")


def _permuted_raw(self, target: tuple):
    order = [self.dims.index(d) for d in target if d in self.dims]
    return self.raw if order == list(range(len(order))) else self.raw.permute(order)


def copy(self) -> Tensor:
    """A new Tensor sharing the raw and metadata."""
    return _keep(self, self.raw, self.dims)


def copy_transpose(self, dims) -> Tensor:
    """The same values with the raw permuted to `dims` (a permutation of self.dims)."""
    caller = "dimtorch.Tensor.copy_transpose()"
    target = dims_arg(dims, caller, "dims")
    if len(target) != len(self.dims):
        raise ValueError(f"{caller}: dims must be a permutation of the tensor's dims "
                         f"({dims_str(self.dims)}), got ({dims_str(target)})")
    _check_target(self, target, caller)
    return _keep(self, _permuted_raw(self, target), target)


def raw_aligned(self, dims):
    """Raw view with axes in `dims` order and size-1 axes for dims the tensor lacks. Every dim of
    the tensor must be in `dims`."""
    caller = "dimtorch.Tensor.raw_aligned()"
    target = dims_arg(dims, caller, "dims")
    _check_target(self, target, caller)
    raw = _permuted_raw(self, target)
    if len(target) == len(self.dims):
        return raw
    sizes = [1] * len(target)
    j = 0
    for i, d in enumerate(target):
        if d in self.dims:
            sizes[i] = raw.shape[j]
            j += 1
    return raw.view(sizes)


def remaining_dims(self, remove) -> tuple:
    """self.dims without `remove` (a Dim or sequence of Dims)."""
    caller = "dimtorch.Tensor.remaining_dims()"
    remove = dims_arg(remove, caller, "remove")
    for d in remove:
        if d not in self.dims:
            raise ValueError(f"{caller}: dim {dim_str(d, self.dims)} is not in the tensor "
                             f"(dims: {dims_str(self.dims, d)}){namesakes_note(d, self.dims)}")
    return tuple(d for d in self.dims if d not in remove)


def get_axis(self, dim) -> int:
    """Raw axis index of `dim`."""
    if not isinstance(dim, Dim):
        raise TypeError(f"dimtorch.Tensor.get_axis(): expected a Dim, got {type(dim).__name__}")
    if dim not in self.dims:
        raise ValueError(f"dimtorch.Tensor.get_axis(): dim {dim_str(dim, self.dims)} is not in the tensor "
                         f"(dims: {dims_str(self.dims, dim)}){namesakes_note(dim, self.dims)}")
    return self.dims.index(dim)


def copy_masked(self, value, dims=None) -> Tensor:
    """The padding frames of the dynamic dims (all, or those in `dims`) set to `value`."""
    caller = "dimtorch.Tensor.copy_masked()"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{caller}: value must be a Python number, got {type(value).__name__}")
    if dims is None:
        masked = [d for d in self.dims if d.is_dynamic()]
    else:
        masked = []
        for d in dims_arg(dims, caller, "dims"):
            if d not in self.dims:
                raise ValueError(f"{caller}: dim {dim_str(d, self.dims)} is not in the tensor "
                                 f"(dims: {dims_str(self.dims, d)}){namesakes_note(d, self.dims)}")
            if d.is_dynamic():
                masked.append(d)
    if not masked:
        return _keep(self, self.raw, self.dims)
    mask = None
    for d in masked:
        m = _tracing.mask_raw(d, self.dims, self.raw.shape, self.raw.device)
        mask = m if mask is None else mask & m
    return _keep(self, torch.where(mask, self.raw, value), self.dims)


METHODS = {"copy": copy, "copy_transpose": copy_transpose, "raw_aligned": raw_aligned,
           "remaining_dims": remaining_dims, "get_axis": get_axis, "copy_masked": copy_masked}


# ---- operators: defined with the elementwise ops (dimtorch.ops.elementwise) ------------------

def __bool__(self):
    raise TypeError("dimtorch.Tensor.__bool__(): the truth value of a Tensor is ambiguous and reading "
                    "it would sync with the device; reduce it (dimtorch.reduce_any / reduce_all) and "
                    "read .raw explicitly")


OPERATORS = {**TENSOR_OPERATORS, "__bool__": __bool__}
