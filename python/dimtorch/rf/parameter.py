"""rf.Parameter: a dimtorch Tensor whose raw is a torch.nn.Parameter (RETURNN frontend's Parameter is a Tensor too).

Assigned to an attribute of a dimtorch.rf.Module, the raw is registered with torch (a parameter, or a
buffer when `auxiliary`, as RETURNN's bridge does), so optimizers, state_dict, .to() and DDP see it,
and reading the attribute gives the Parameter itself. A Parameter is usable wherever a Tensor is
(ops take it on their fast paths); ops return plain Tensors.

Its RETURNN attributes (`initial`, `weight_decay`, `trainable`, `auxiliary`, `non_critical_for_restore`)
live on the torch Parameter (a dimtorch Tensor has no instance dict): so `module.parameters()` (torch's,
what an optimizer takes) gives objects whose `weight_decay` is the rf Parameter's, and
`for p in model.parameters(): p.weight_decay = 1e-4` (RETURNN code) sets it.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Optional, Sequence, Union

import numpy
import torch

from .._C import Dim, Tensor
from .._core import default_device as _default_device
from .._core.args import dims_str
from .._core.dtypes import to_torch_dtype

__all__ = ["Parameter", "set_parameter_copy_behavior_ctx"]

_INITIAL, _TRAINABLE = "_rf_initial", "_rf_trainable"
_AUXILIARY, _NON_CRITICAL = "_rf_auxiliary", "_rf_non_critical_for_restore"
_copy_behavior = "copy_init"


def _dtype_name(raw: torch.Tensor) -> str:
    return str(raw.dtype).rsplit(".", 1)[-1]


def _check_dims(dims, caller: str) -> tuple:
    if isinstance(dims, Dim):
        dims = (dims,)
    dims = tuple(dims)
    for i, d in enumerate(dims):
        if not isinstance(d, Dim):
            raise TypeError(f"{caller}: dims must be Dims, got {type(d).__name__} at {i}")
        if d.size is None or not d.is_static():
            raise ValueError(f"{caller}: dim {d!r} has no static size; parameters need static dims")
        if any(e is d for e in dims[:i]):
            raise ValueError(f"{caller}: dim {d!r} is given twice (dims: {dims_str(dims)})")
    return dims


def _same_layout(value: Tensor, dims: tuple) -> bool:
    """Whether value's raw is the parameter's layout though its dims are other Dims (RETURNN code
    sets `initial` from a Tensor over e.g. `3 * out_dim` for a parameter over its qkv dim, and RETURNN
    copies the raw): as many dims, and each either the parameter's dim at that position or a dim
    the parameter lacks with that dim's size (never a parameter's dim at another position)."""
    if len(value.dims) != len(dims):
        return False
    for v, d, n in zip(value.dims, dims, value.raw.shape):
        if v is not d and (any(v is e for e in dims) or d.size is None or n != d.size):
            return False
    return True


def _raw_value(value, dims: tuple, caller: str) -> Union[torch.Tensor, int, float, bool]:
    """`value` as something raw.copy_() takes: a Tensor over the parameter's dims (any order) aligned
    to them, a torch Tensor or numpy array of the shape, or a number."""
    if isinstance(value, Tensor):
        if len(value.dims) != len(dims) or not all(any(e is d for e in value.dims) for d in dims):
            if all(any(e is d for e in dims) for d in value.dims):  # fewer dims: broadcast
                return value.raw_aligned(dims)
            if _same_layout(value, dims):  # other Dims of the same sizes in place: the raw, as RETURNN
                return value.raw
            raise ValueError(f"{caller}: the value has dims ({dims_str(value.dims)}), the parameter "
                             f"({dims_str(dims)})")
        return value.raw if value.dims == dims else value.raw_aligned(dims)
    if isinstance(value, numpy.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, (torch.Tensor, bool, int, float)):
        return value
    raise TypeError(f"{caller}: expected a Tensor, a number, a torch.Tensor or a numpy array, got {type(value).__name__}")


class Parameter(Tensor):
    """Parameter(dims, dtype=None, *, sparse_dim=None, trainable=None, auxiliary=False,
    non_critical_for_restore=False, weight_decay=0.0, initial=None, raw_tensor=None, device=None)

    RETURNN frontend's Parameter: zeros over `dims` (static Dims; or a Tensor as the first argument,
    which gives dims, dtype, sparse_dim and the initial value), dtype default float32 (int64 with a
    sparse_dim). `initial`: a number, a Tensor over its dims (any order), a numpy array or an
    initializer (dimtorch.rf.init, called as init(dims, dtype, device=)); assigning `param.initial`
    later sets the values (in place, no gradient). `trainable` None means: not for auxiliary or integer
    parameters, else yes (requires_grad). `raw_tensor`: an existing torch Parameter to view (e.g. a
    torch module's). `device` None: rf's default device (set_default_device(_ctx)), as in RETURNN."""

    __slots__ = ()

    def __init__(self, dims_or_tensor: Union[None, Sequence[Dim], Tensor] = None, dtype: Optional[str] = None, *,
                 dims: Optional[Sequence[Dim]] = None, sparse_dim: Optional[Dim] = None,
                 trainable: Optional[bool] = None, auxiliary: bool = False, non_critical_for_restore: bool = False,
                 weight_decay: Optional[float] = 0.0, initial=None, raw_tensor: Optional[torch.Tensor] = None,
                 device=None):
        caller = "dimtorch.rf.Parameter()"
        if dims_or_tensor is None:
            if dims is None:
                raise ValueError(f"{caller}: dims must be given")
        elif isinstance(dims_or_tensor, Tensor):
            if initial is not None:
                raise ValueError(f"{caller}: initial is given twice (a Tensor as the first argument is the initial value)")
            initial = dims_or_tensor
            dims = dims_or_tensor.dims if dims is None else dims
            dtype = dtype or dims_or_tensor.dtype
            sparse_dim = sparse_dim if sparse_dim is not None else dims_or_tensor.sparse_dim
        elif isinstance(dims_or_tensor, (tuple, list, Dim)):
            if dims is not None:
                raise ValueError(f"{caller}: dims are given twice")
            dims = dims_or_tensor
        else:
            raise TypeError(f"{caller}: the first argument must be dims or a Tensor, got {type(dims_or_tensor).__name__}")
        dims = _check_dims(dims, caller)
        if dtype is None:
            dtype = _dtype_name(raw_tensor) if raw_tensor is not None else "int64" if sparse_dim is not None else "float32"
        torch_dtype = to_torch_dtype(dtype, caller)
        if raw_tensor is None:
            if device is None:  # rf's default device (set_default_device(_ctx)), as RETURNN's parameters take
                device = _default_device.get()
            raw = torch.nn.Parameter(torch.zeros([d.size for d in dims], dtype=torch_dtype, device=device),
                                     requires_grad=False)
        else:
            if tuple(raw_tensor.shape) != tuple(d.size for d in dims):
                raise ValueError(f"{caller}: raw_tensor has shape {tuple(raw_tensor.shape)}, the dims "
                                 f"({dims_str(dims)}) need {tuple(d.size for d in dims)}")
            raw = raw_tensor if isinstance(raw_tensor, torch.nn.Parameter) else \
                torch.nn.Parameter(raw_tensor, requires_grad=raw_tensor.requires_grad)
        Tensor.__init__(self, raw, dims, sparse_dim=sparse_dim)
        if raw_tensor is None or weight_decay or "weight_decay" not in raw.__dict__:
            raw.weight_decay = weight_decay  # (an existing torch parameter keeps its own unless one is given)
        raw.__dict__[_AUXILIARY] = bool(auxiliary)
        raw.__dict__[_NON_CRITICAL] = bool(non_critical_for_restore)
        self.trainable = trainable
        if raw_tensor is None or initial is not None:
            self.initial = initial

    @classmethod
    def _view(cls, raw: torch.Tensor, dims: tuple) -> "Parameter":
        """The Parameter of an existing torch parameter or buffer `raw` (its RETURNN attributes, if any,
        are on it): what a module attribute reads as."""
        p = cls.__new__(cls)
        Tensor.__init__(p, raw, dims)
        return p

    # -- values ------------------------------------------------------------------------------------
    @property
    def initial(self):
        """The initial value or initializer (assigning one sets the values, in place, without gradient)."""
        return self.raw.__dict__.get(_INITIAL)

    @initial.setter
    def initial(self, value) -> None:
        raw = self.raw
        raw.__dict__[_INITIAL] = value
        if value is None:
            value = 0
        elif callable(value) and not isinstance(value, Tensor):
            value = value(self.dims, self.dtype, device=raw.device)
        value = _raw_value(value, self.dims, "dimtorch.rf.Parameter.initial")
        with torch.no_grad():
            raw.copy_(value)

    def assign(self, value) -> None:
        """Sets the values to `value` (a Tensor over the parameter's dims, any order, or a number), in
        place, without gradient: the registered torch parameter keeps its identity."""
        value = _raw_value(value, self.dims, "dimtorch.rf.Parameter.assign()")
        with torch.no_grad():
            self.raw.copy_(value)

    def assign_add(self, value) -> None:
        """Adds `value` to the values, in place, without gradient (see assign)."""
        value = _raw_value(value, self.dims, "dimtorch.rf.Parameter.assign_add()")
        with torch.no_grad():
            self.raw.add_(value)

    @property
    def raw_tensor(self) -> torch.Tensor:
        """The torch parameter. Assigning a torch Tensor replaces its data (the same Parameter object,
        so modules and optimizers keep seeing it); its shape must fit the dims."""
        return self.raw

    @raw_tensor.setter
    def raw_tensor(self, value) -> None:
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(d.size for d in self.dims):
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"dimtorch.rf.Parameter.raw_tensor = ...: need a torch.Tensor of shape "
                             f"{tuple(d.size for d in self.dims)} (dims {dims_str(self.dims)}), got {got}")
        if value is not self.raw:
            self.raw.data = value.detach()

    def to(self, *, device=None, dtype: Optional[str] = None) -> None:
        """Moves the values to `device` / `dtype`, in place (the torch Parameter's data)."""
        raw = self.raw
        raw.data = raw.data.to(device=device, dtype=to_torch_dtype(dtype, "dimtorch.rf.Parameter.to()")
                               if dtype is not None else None)

    # -- RETURNN attributes -------------------------------------------------------------------------
    @property
    def weight_decay(self) -> float:
        """Weight decay of this parameter (dimtorch.rf.runner makes optimizer parameter groups by it)."""
        return self.raw.__dict__.get("weight_decay") or 0.0

    @weight_decay.setter
    def weight_decay(self, value: Optional[float]) -> None:
        self.raw.weight_decay = value

    @property
    def trainable(self) -> Optional[bool]:
        """Whether an optimizer updates it (requires_grad); None (the default): not for auxiliary or
        integer parameters."""
        return self.raw.__dict__.get(_TRAINABLE)

    @trainable.setter
    def trainable(self, value: Optional[bool]) -> None:
        raw = self.raw
        raw.__dict__[_TRAINABLE] = value
        if value is None:
            value = not self.auxiliary and (raw.dtype.is_floating_point or raw.dtype.is_complex)
        raw.requires_grad_(bool(value))

    @property
    def auxiliary(self) -> bool:
        """An auxiliary parameter (running statistics and the like): a buffer of its module, not
        trainable by default."""
        return bool(self.raw.__dict__.get(_AUXILIARY, False))

    @auxiliary.setter
    def auxiliary(self, value: bool) -> None:
        self.raw.__dict__[_AUXILIARY] = bool(value)

    @property
    def non_critical_for_restore(self) -> bool:
        return bool(self.raw.__dict__.get(_NON_CRITICAL, False))

    @non_critical_for_restore.setter
    def non_critical_for_restore(self, value: bool) -> None:
        self.raw.__dict__[_NON_CRITICAL] = bool(value)

    # -- copies ----------------------------------------------------------------------------------
    def _copy_init(self) -> "Parameter":
        """A new parameter with the same dims and attributes, initialized by `initial` again (a fresh draw
        for an initializer): RETURNN's copy of a parameter."""
        init = self.initial
        new = Parameter(self.dims, self.dtype, sparse_dim=self.sparse_dim, trainable=self.trainable,
                        auxiliary=self.auxiliary, non_critical_for_restore=self.non_critical_for_restore,
                        weight_decay=self.weight_decay, device=self.raw.device)
        if init is not None:
            new.initial = init
        else:
            new.assign(self.raw.detach())
        return new

    def __copy__(self):
        return self if _copy_behavior == "share" else self._copy_init()

    def __deepcopy__(self, memo=None):
        return self if _copy_behavior == "share" else self._copy_init()

    def __reduce__(self):
        return _rebuild_parameter, (self.raw, self.dims)

    def __repr__(self):
        return f"rf.Parameter(dims=({dims_str(self.dims)}), dtype={self.dtype})"


def _rebuild_parameter(raw, dims):
    return Parameter._view(raw, dims)


@contextmanager
def set_parameter_copy_behavior_ctx(mode: str):
    """Within the block, copy.copy/deepcopy of a Parameter: "copy_init" (default) makes a new parameter
    initialized by `initial` again, "share" gives the same parameter."""
    global _copy_behavior
    if mode not in ("copy_init", "share"):
        raise ValueError(f"dimtorch.rf.set_parameter_copy_behavior_ctx(): mode must be 'copy_init' or 'share', got {mode!r}")
    old, _copy_behavior = _copy_behavior, mode
    try:
        yield
    finally:
        _copy_behavior = old
