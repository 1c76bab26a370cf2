"""RETURNN's Tensor API on dimtorch.Tensor itself (no wrapper): what returnn.tensor.Tensor code reads and
calls beyond dimtorch's own methods. dimtorch._capture.compile puts these into the type dict of the C++
type, so that every Tensor an op returns has them; torch.compile traces them as Python.

Construction (Tensor(name, dims=, dtype=, ...)), copy(name=) and copy_template() are in dimtorch.ops.tensor
with the rest of construction; raw_tensor and the assignable markers are fields of the C++ type
(src/core/tensor.cpp).
"""
from __future__ import annotations

import torch

from .._C import Dim, Tensor
from .._core import run_ctx as _run_ctx
from .._core.args import dim_str, dims_arg, dims_str, namesakes_note
from .._core.global_dims import DimTypes
from ._support import flag


class VerifyOutShapeException(ValueError):
    """Tensor.verify_out_shape(): the dims are not the expected ones (RETURNN's name)."""


def _check_self(self, caller: str) -> None:
    """The methods here are plain functions in the type dict: called unbound, `self` may be anything."""
    if not isinstance(self, Tensor):  # (rf.Parameter is a Tensor subclass)
        raise TypeError(f"{caller}: expected a dimtorch.Tensor, got {type(self).__name__}")


# ---- properties ------------------------------------------------------------------------------

def _get_feature_dim_axis(self):
    """The axis of feature_dim, or None."""
    f = self.feature_dim
    return None if f is None else self.dims.index(f)


def _set_feature_dim_axis(self, axis):
    """feature_dim_axis = i (negative from the end) marks dims[i] as the feature dim; None unmarks."""
    if axis is None:
        self.feature_dim = None
        return
    n = len(self.dims)
    if isinstance(axis, bool) or not isinstance(axis, int) or not -n <= axis < n:
        raise ValueError(f"dimtorch.Tensor.feature_dim_axis = ...: expected an axis of the dims "
                         f"({dims_str(self.dims)}) or None, got {axis!r}")
    self.feature_dim = self.dims[axis]


def _batch_dim_axis(self):
    """The axis of the batch dim (a dim of kind Dim.Types.Batch, e.g. batch_dim), or None."""
    for i, d in enumerate(self.dims):
        attrs = d._rf_attrs
        if attrs is not None and attrs.get("kind") is DimTypes.Batch:
            return i
    return None


def _dims_set(self) -> set:
    """set(self.dims)."""
    return set(self.dims)


def _batch_shape(self) -> tuple:
    """RETURNN's batch_shape: each dim's static size, None for the others."""
    return tuple(d.size for d in self.dims)


PROPERTIES = {
    "feature_dim_axis": property(_get_feature_dim_axis, _set_feature_dim_axis),
    "batch_dim_axis": property(_batch_dim_axis),
    "dims_set": property(_dims_set),
    "dim_tags": property(lambda self: self.dims, doc="RETURNN's old name of dims."),
    "batch_shape": property(_batch_shape),
    "control_flow_ctx": property(lambda self: None, doc="RETURNN's graph-mode context: always None (eager)."),
}


# ---- dims ------------------------------------------------------------------------------------

def get_axis_from_description(self, axis, allow_int=True) -> int:
    """The axis of `axis`: a Dim of the tensor, or an int (negative from the end)."""
    caller = "dimtorch.Tensor.get_axis_from_description()"
    _check_self(self, caller)
    allow_int = flag(allow_int, caller, "allow_int")
    if isinstance(axis, Dim):
        return self.get_axis(axis)
    if isinstance(axis, int) and not isinstance(axis, bool):
        if not allow_int:
            raise TypeError(f"{caller}: axis must be a Dim (allow_int=False), got {axis}")
        n = len(self.dims)
        if not -n <= axis < n:
            raise ValueError(f"{caller}: axis {axis} is out of range (dims: {dims_str(self.dims)})")
        return axis % n
    raise TypeError(f"{caller}: axis must be a Dim or an int, got {type(axis).__name__} "
                    f"(RETURNN's string descriptions are not supported)")


def get_dim_tag(self, axis: int) -> Dim:
    """The dim at `axis`."""
    _check_self(self, "dimtorch.Tensor.get_dim_tag()")
    return self.dims[get_axis_from_description(self, axis)]


def get_dyn_size_tags(self) -> list:
    """The dims of the tensor that have lengths."""
    _check_self(self, "dimtorch.Tensor.get_dyn_size_tags()")
    return [d for d in self.dims if d.is_dynamic()]


def _expanded_raw(self, dims: tuple, caller: str) -> torch.Tensor:
    """self's raw aligned to `dims` and expanded to their sizes (missing dims: a broadcast view)."""
    raw = self.raw_aligned(dims)
    sizes = []
    for d, have in zip(dims, raw.shape):
        if d in self.dims:
            sizes.append(have)
            continue
        size = d.get_max_size()
        if size is None:
            raise ValueError(f"{caller}: dim {dim_str(d)} is not in the tensor and takes its size from data, so "
                             f"the tensor cannot be broadcast to it (dims: {dims_str(self.dims)})")
        sizes.append(size)
    return raw.expand(sizes)


def copy_compatible_to_dims_raw(self, dims, *, add_dims: bool = True, unbroadcast: bool = False) -> torch.Tensor:
    """The raw with its axes in the order of `dims` (which hold all of self's dims), a size-1 axis
    for each dim of `dims` the tensor lacks (its size with unbroadcast=True)."""
    caller = "dimtorch.Tensor.copy_compatible_to_dims_raw()"
    _check_self(self, caller)
    add_dims, unbroadcast = flag(add_dims, caller, "add_dims"), flag(unbroadcast, caller, "unbroadcast")
    dims = dims_arg(dims, caller, "dims")
    missing = [d for d in dims if d not in self.dims]
    if missing and not add_dims:
        raise ValueError(f"{caller}: dims {dims_str(missing)} are not in the tensor (dims: {dims_str(self.dims)}) "
                         f"and add_dims=False")
    if unbroadcast:
        return _expanded_raw(self, dims, caller)
    return self.raw_aligned(dims)


def copy_compatible_to_dims(self, dims, *, add_dims: bool = True, unbroadcast: bool = False) -> Tensor:
    """The tensor over `dims` (which hold all of self's dims), in their order. A dim it lacks is
    added as a broadcast view (expand, no copy) at its size: dimtorch has no size-1 broadcast dims,
    so `unbroadcast` is what it does either way."""
    caller = "dimtorch.Tensor.copy_compatible_to_dims()"
    _check_self(self, caller)
    add_dims, unbroadcast = flag(add_dims, caller, "add_dims"), flag(unbroadcast, caller, "unbroadcast")
    dims = dims_arg(dims, caller, "dims")
    missing = [d for d in dims if d not in self.dims]
    if missing and not add_dims:
        raise ValueError(f"{caller}: dims {dims_str(missing)} are not in the tensor (dims: {dims_str(self.dims)}) "
                         f"and add_dims=False")
    if not missing:
        return self.copy_transpose(dims)
    return Tensor(_expanded_raw(self, dims, caller), dims, sparse_dim=self.sparse_dim,
                  feature_dim=self.feature_dim, name=self.name)


def copy_compatible_to(self, data: Tensor, add_dims: bool = True, unbroadcast: bool = False,
                       except_feature: bool = False, except_axis=None, check_sparse: bool = True,
                       check_dtype: bool = True) -> Tensor:
    """The tensor over `data`'s dims (copy_compatible_to_dims(data.dims)), checking sparse_dim and
    dtype against data's unless told not to."""
    caller = "dimtorch.Tensor.copy_compatible_to()"
    _check_self(self, caller)
    if not isinstance(data, Tensor):
        raise TypeError(f"{caller}: data must be a dimtorch.Tensor, got {type(data).__name__}")
    check_sparse, check_dtype = flag(check_sparse, caller, "check_sparse"), flag(check_dtype, caller, "check_dtype")
    if flag(except_feature, caller, "except_feature") or except_axis is not None:
        raise NotImplementedError(f"{caller}: except_feature and except_axis are not supported")
    if check_sparse and data.sparse_dim is not self.sparse_dim:
        raise ValueError(f"{caller}: sparse_dim {self.sparse_dim!r} differs from data's {data.sparse_dim!r}")
    if check_dtype and data.dtype != self.dtype:
        raise ValueError(f"{caller}: dtype {self.dtype} differs from data's {data.dtype}")
    unbroadcast = flag(unbroadcast, caller, "unbroadcast")
    if unbroadcast or not flag(add_dims, caller, "add_dims") or set(data.dims) <= set(self.dims) \
            or not set(self.dims) <= set(data.dims):  # (no dim to add, or the error: copy_compatible_to_dims's)
        return copy_compatible_to_dims(self, data.dims, add_dims=add_dims, unbroadcast=unbroadcast)
    # As RETURNN: a dim the tensor lacks becomes a new broadcast dim of size 1 in its place (the
    # template's own dim where that is static 1), not the template's dim: the values do not vary
    # along it, and a size-0 or dynamic template dim would be wrong for them.
    dims = [d if d in self.dims or d.size == 1 else Dim(1, name=f"{d.name or 'unnamed'}_dummy_dim1")
            for d in data.dims]
    return Tensor(self.raw_aligned(data.dims), dims, sparse_dim=self.sparse_dim, feature_dim=self.feature_dim,
                  name=self.name)


def verify_out_shape(self, out_shape, allow_missing_implicit_dims: bool = False) -> None:
    """Raises VerifyOutShapeException unless the tensor's dims are exactly `out_shape` (a set or
    sequence of Dims; order does not matter)."""
    caller = "dimtorch.Tensor.verify_out_shape()"
    _check_self(self, caller)
    if not isinstance(out_shape, (set, frozenset, list, tuple)):
        raise TypeError(f"{caller}: out_shape must be a set or sequence of Dims, got {type(out_shape).__name__}")
    expected = dims_arg(list(out_shape), caller, "out_shape")
    have = self.dims
    extra = [d for d in have if d not in expected]
    missing = [d for d in expected if d not in have]
    if flag(allow_missing_implicit_dims, caller, "allow_missing_implicit_dims"):
        missing = []
    if extra or missing:
        among = (have, expected)
        raise VerifyOutShapeException(
            f"{caller}: the tensor has dims ({dims_str(have, among)}), expected ({dims_str(expected, among)})"
            + (f"; not expected: {dims_str(extra, among)}" if extra else "")
            + (f"; missing: {dims_str(missing, among)}" if missing else "") + namesakes_note(*among))


# ---- the run context -------------------------------------------------------------------------

def mark_as_loss(self, name: str, *, scale: float = 1.0, as_error: bool = False, use_normalized_loss: bool = False,
                 use_flatten_frames: bool = True, custom_inv_norm_factor=None) -> None:
    """Hands the tensor to the run context as the loss `name` (see dimtorch.rf.get_run_ctx())."""
    caller = "dimtorch.Tensor.mark_as_loss()"
    _check_self(self, caller)
    if not isinstance(name, str):
        raise TypeError(f"{caller}: name must be a str, got {type(name).__name__}")
    _run_ctx.current(caller).mark_as_loss(
        self, name, scale=scale, as_error=as_error, use_normalized_loss=use_normalized_loss,
        use_flatten_frames=use_flatten_frames, custom_inv_norm_factor=custom_inv_norm_factor)


def mark_as_output(self, name: str, *, shape=None) -> None:
    """Hands the tensor to the run context as the output `name`, its dims in the order of `shape`."""
    caller = "dimtorch.Tensor.mark_as_output()"
    _check_self(self, caller)
    if not isinstance(name, str):
        raise TypeError(f"{caller}: name must be a str, got {type(name).__name__}")
    _run_ctx.current(caller).mark_as_output(self, name, shape=shape)


def mark_as_default_output(self, *, shape=None) -> None:
    """Hands the tensor to the run context as its default output."""
    _check_self(self, "dimtorch.Tensor.mark_as_default_output()")
    _run_ctx.current("dimtorch.Tensor.mark_as_default_output()").mark_as_default_output(self, shape=shape)


def reset(self) -> None:
    """raw_tensor = None: the Tensor becomes a template (RETURNN's reset)."""
    _check_self(self, "dimtorch.Tensor.reset()")
    self.raw_tensor = None


METHODS = {
    "get_axis_from_description": get_axis_from_description, "get_dim_tag": get_dim_tag,
    "get_dyn_size_tags": get_dyn_size_tags, "copy_compatible_to_dims": copy_compatible_to_dims,
    "copy_compatible_to_dims_raw": copy_compatible_to_dims_raw, "copy_compatible_to": copy_compatible_to,
    "verify_out_shape": verify_out_shape, "mark_as_loss": mark_as_loss, "mark_as_output": mark_as_output,
    "mark_as_default_output": mark_as_default_output, "reset": reset,
}
