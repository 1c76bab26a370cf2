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
from .._core.raw_input import is_numpy
from .._core.args import dim_str, dims_arg, dims_str, namesakes_note
from .elementwise import TENSOR_OPERATORS

_CTOR = "dimtorch.Tensor()"


def __init__(self, *args, **kwargs):
    """Tensor(raw, dims, *, sparse_dim=None, feature_dim=None, name=None): checks raw against dims.
    RETURNN's form, Tensor(name, dims=, dtype=, *, sparse_dim=, feature_dim=, feature_dim_axis=,
    raw_tensor=), is told apart by its first argument, a str (or no positional argument and no
    `raw`): without raw_tensor it makes a template (dims and dtype, no raw).

    While tracing, a dynamic dim's lengths are graph values: the raw's size of it is not checked
    against their max (the eager constructor does that on the host), and the first raw over a dim
    without a static size gives its size in the trace (dimtorch._core.sizes)."""
    form = _init_rf if (args and isinstance(args[0], str)) or (not args and kwargs and "raw" not in kwargs) else _init
    try:
        form(self, *args, **kwargs)
    except TypeError as e:  # Python's own argument errors name the form: name the call instead
        message = str(e)
        prefix = form.__name__ + "()"
        if not message.startswith(prefix):
            raise
        raise TypeError(_CTOR + message[len(prefix):]) from None


def _init(self, raw, dims, *, sparse_dim=None, feature_dim=None, name=None):
    """dimtorch's form of the constructor."""
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
    # Markers first: the core checks them against the dims when raw and dims complete the Tensor.
    self.sparse_dim = sparse_dim
    self.feature_dim = feature_dim
    self.name = name
    self.dims = dims
    self.raw = raw


class _NotSpecified:
    def __repr__(self):
        return "NotSpecified"


NOT_SPECIFIED = _NotSpecified()  # RETURNN's feature_dim_axis default: no axis given


def _init_rf(self, name, dims=None, dtype=None, *, sparse_dim=None, feature_dim=None,
             feature_dim_axis=NOT_SPECIFIED, raw_tensor=None, version=None, control_flow_ctx=None):
    """RETURNN's form: Tensor(name, dims, dtype, *, sparse_dim, feature_dim, feature_dim_axis,
    raw_tensor). dtype defaults to "int32" with a sparse_dim, else to raw_tensor's dtype, else to
    "float32"; feature_dim_axis (an int, negative from the end, or None) picks the feature_dim
    among dims. RETURNN's Tensor version 2 semantics: no implicit feature dim."""
    if not isinstance(name, str):
        raise TypeError(f"{_CTOR}: name must be a str, got {type(name).__name__}")
    if dims is None:
        raise TypeError(f"{_CTOR}: dims are missing (RETURNN's form: Tensor(name, dims=[...], dtype=...))")
    dims = dims_arg(dims, _CTOR, "dims")
    for i, d in enumerate(dims):
        if d in dims[:i]:
            raise ValueError(f"{_CTOR}: dim {dim_str(d)} appears twice (dims: {dims_str(dims)})")
    if version not in (None, 2):
        raise ValueError(f"{_CTOR}: only RETURNN's Tensor version 2 is supported, got version={version!r}")
    if control_flow_ctx is not None:
        raise ValueError(f"{_CTOR}: control_flow_ctx is RETURNN's graph mode; dimtorch runs eagerly")
    if is_numpy(raw_tensor):  # RETURNN code fills extern data and lengths with numpy: converted once
        raw_tensor = torch.as_tensor(raw_tensor)
    if raw_tensor is not None and not isinstance(raw_tensor, torch.Tensor):
        raise TypeError(f"{_CTOR}: raw_tensor must be a torch.Tensor (or a numpy array) or None, got "
                        f"{type(raw_tensor).__name__}")
    if sparse_dim is not None and not isinstance(sparse_dim, Dim):
        raise TypeError(f"{_CTOR}: sparse_dim must be a Dim or None, got {type(sparse_dim).__name__}")
    if feature_dim_axis is not NOT_SPECIFIED and feature_dim_axis is not None:
        if isinstance(feature_dim_axis, bool) or not isinstance(feature_dim_axis, int) \
                or not -len(dims) <= feature_dim_axis < len(dims):
            raise ValueError(f"{_CTOR}: feature_dim_axis must be an axis of the dims ({dims_str(dims)}) or None, "
                             f"got {feature_dim_axis!r}")
        axis_dim = dims[feature_dim_axis]
        if feature_dim is not None and feature_dim is not axis_dim:
            raise ValueError(f"{_CTOR}: feature_dim {dim_str(feature_dim)} is not the dim at feature_dim_axis "
                             f"{feature_dim_axis} ({dim_str(axis_dim)})")
        feature_dim = axis_dim
    elif feature_dim_axis is None and feature_dim is not None:
        raise ValueError(f"{_CTOR}: feature_dim given with feature_dim_axis=None")
    if feature_dim is not None and (not isinstance(feature_dim, Dim) or feature_dim not in dims):
        raise ValueError(f"{_CTOR}: feature_dim must be one of the dims ({dims_str(dims)}), got {feature_dim!r}")
    if dtype is None:
        dtype = "int32" if sparse_dim is not None else dtype_name(raw_tensor.dtype) if raw_tensor is not None \
            else "float32"
    elif not isinstance(dtype, str):
        raise TypeError(f"{_CTOR}: dtype must be a str such as 'float32', got {type(dtype).__name__}")
    self.sparse_dim = sparse_dim
    self.feature_dim = feature_dim
    self.name = name
    self._template_dtype = dtype
    self.dims = dims
    if raw_tensor is not None:
        self.raw = raw_tensor  # completes the Tensor: checked against the dims and the dtype


# ---- derived properties (the stored ones, raw/dims/sparse_dim/feature_dim/name, are C fields) --

def ndim(self) -> int:
    """Number of dims."""
    return len(self.dims)


def raw_tensor(self):
    """RETURNN's name of the raw (None for a template: dimtorch's own Tensors always have one)."""
    return self.raw


def set_raw_tensor(self, value) -> None:
    """raw_tensor = value as torch.compile traces it: the raw of a template made in the graph (a
    Tensor that has one keeps it there: reassigning a raw is eager only)."""
    if value is None:
        raise RuntimeError("dimtorch.Tensor.raw_tensor = None: not supported while tracing")
    self.raw = value


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
              "requires_grad": requires_grad, "raw_tensor": raw_tensor}


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


def copy(self, name=None) -> Tensor:
    """A new Tensor sharing the raw and metadata (a template's copy is a template); `name` replaces
    the name."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"dimtorch.Tensor.copy(): name must be a str or None, got {type(name).__name__}")
    if self.raw_tensor is None:
        return copy_template(self, name)
    return Tensor(self.raw, self.dims, sparse_dim=self.sparse_dim, feature_dim=self.feature_dim,
                  name=self.name if name is None else name)


def copy_template(self, name=None, dtype=None) -> Tensor:
    """A template (dims, dtype and markers; no raw) like self; `name` and `dtype` replace its own
    (a dtype that is not an integer one drops the sparse_dim)."""
    caller = "dimtorch.Tensor.copy_template()"
    if not isinstance(self, Tensor):  # (a plain function in the type dict: called unbound, self may be anything)
        raise TypeError(f"{caller}: expected a dimtorch.Tensor, got {type(self).__name__}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"{caller}: name must be a str or None, got {type(name).__name__}")
    if dtype is not None and not isinstance(dtype, str):
        raise TypeError(f"{caller}: dtype must be a str such as 'float32' or None, got {type(dtype).__name__}")
    t = object.__new__(Tensor)
    t.name = self.name if name is None else name
    if dtype is None or dtype.startswith(("int", "uint")):
        t.sparse_dim = self.sparse_dim
    t.feature_dim = self.feature_dim
    t._template_dtype = self.dtype if dtype is None else dtype
    t.dims = self.dims
    return t


def copy_transpose(self, dims) -> Tensor:
    """The same values with the raw permuted to `dims` (a permutation of self.dims; RETURNN's axes
    by position, ints, may stand for dims)."""
    caller = "dimtorch.Tensor.copy_transpose()"
    if isinstance(dims, (list, tuple)) and any(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        n = len(self.dims)
        for d in dims:
            if isinstance(d, int) and not isinstance(d, bool) and not -n <= d < n:
                raise ValueError(f"{caller}: axis {d} is out of range for the tensor's dims ({dims_str(self.dims)})")
        dims = [self.dims[d] if isinstance(d, int) and not isinstance(d, bool) else d for d in dims]
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


def remaining_dims(self, remove=None) -> list:
    """A list of self.dims without `remove` (a Dim or sequence of Dims; None, and None entries,
    remove nothing: RETURNN code passes a feature_dim that may be None)."""
    caller = "dimtorch.Tensor.remaining_dims()"
    if remove is None:
        remove = ()
    elif isinstance(remove, (list, tuple)):
        remove = [d for d in remove if d is not None]
    remove = dims_arg(remove, caller, "remove")
    for d in remove:
        if d not in self.dims:
            raise ValueError(f"{caller}: dim {dim_str(d, self.dims)} is not in the tensor "
                             f"(dims: {dims_str(self.dims, d)}){namesakes_note(d, self.dims)}")
    return [d for d in self.dims if d not in remove]


def get_axis(self, dim) -> int:
    """Raw axis index of `dim`."""
    if not isinstance(dim, Dim):
        raise TypeError(f"dimtorch.Tensor.get_axis(): expected a Dim, got {type(dim).__name__}")
    if dim not in self.dims:
        raise ValueError(f"dimtorch.Tensor.get_axis(): dim {dim_str(dim, self.dims)} is not in the tensor "
                         f"(dims: {dims_str(self.dims, dim)}){namesakes_note(dim, self.dims)}")
    return self.dims.index(dim)


def _lengths_dims_in(dim: Dim, dims) -> bool:
    lengths = dim.lengths
    return lengths is None or all(b in dims for b in lengths.dims)


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
    # A dim whose lengths are over a dim the tensor lacks is left unmasked, as RETURNN does (e.g. a
    # dim of one beam's lengths on a tensor without the beam): which frames are padding is not known.
    masked = [d for d in masked if _lengths_dims_in(d, self.dims)]
    if not masked:
        return _keep(self, self.raw, self.dims)
    mask = None
    for d in masked:
        m = _tracing.mask_raw(d, self.dims, self.raw.shape, self.raw.device)
        mask = m if mask is None else mask & m
    return _keep(self, torch.where(mask, self.raw, value), self.dims)


METHODS = {"copy": copy, "copy_transpose": copy_transpose, "raw_aligned": raw_aligned,
           "remaining_dims": remaining_dims, "get_axis": get_axis, "copy_masked": copy_masked}


# Methods defined in Python only (put into the type dict as they are).
PYTHON_METHODS = {"copy_template": copy_template}


# ---- operators: defined with the elementwise ops (dimtorch.ops.elementwise) ------------------

def __bool__(self):
    raise TypeError("dimtorch.Tensor.__bool__(): the truth value of a Tensor is ambiguous and reading "
                    "it would sync with the device; reduce it (dimtorch.reduce_any / reduce_all) and "
                    "read .raw explicitly")


OPERATORS = {**TENSOR_OPERATORS, "__bool__": __bool__}
