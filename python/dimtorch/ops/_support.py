"""What the op definitions share: argument checks and messages as the C++ core gives them, error naming, masks of padding."""
from __future__ import annotations

import functools

import torch

from .._C import Dim, Tensor
from .._core.args import dim_str, dims_arg, has_namesake, namesakes_note
from .._core.errors import torch_keyword_hint
from .._core import sizes as _sizes
from .._core.tracing import dynamo_tracing, mask_raw, tracing

MAX_DIMS = 24  # kMaxDims of src/core/common.h

# Errors that src/core/backend.cpp's name_error prefixes with the call (exact types, not subclasses).
_NAMED_TYPES = (TypeError, ValueError, RuntimeError, IndexError, OverflowError, NotImplementedError)


def names_errors(caller: str):
    """Decorator of an op definition: an error torch raises inside it (torch's messages name no
    dimtorch call) comes out as "<caller>: <message>", of the same type, as the C++ functions'
    wrapper does (src/core/functions.h); Python's own "unexpected keyword argument 'dim'" gets the hint
    of the keyword to use. Costs ~0.15 us a call (a try is free in Python 3.11: no tracing() check
    here, it cost 0.4 us); Dynamo traces the try like the rest (a graph break inside still resumes)."""
    def wrap(fn):
        @functools.wraps(fn)
        def definition(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except _NAMED_TYPES as e:
                text = str(e)
                if type(e) not in _NAMED_TYPES or text.startswith("dimtorch"):
                    raise
                hint = torch_keyword_hint(text, fn) if type(e) is TypeError else ""
                raise type(e)(f"{caller}: {text}{hint}") from None
        return definition
    return wrap


def names_argument_errors(caller: str):
    """Decorator of an op that runs the user's code (scan, while_loop, cond): only an error in binding
    its own arguments ("unexpected keyword argument 'dim'") is named after the call, with the keyword
    hint; errors from inside the user's functions come out untouched, traceback and all."""
    def wrap(fn):
        @functools.wraps(fn)
        def definition(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except TypeError as e:
                if type(e) is not TypeError or e.__traceback__.tb_next is not None:
                    raise  # raised inside fn, not by the call's binding of its arguments
                raise TypeError(f"{caller}: {e}{torch_keyword_hint(str(e), fn)}") from None
        return definition
    return wrap


def check_dim_map(m, caller: str, what: str = "dim_map") -> None:
    """A dict of Dim to Dim (the nested ops' dim maps), else a TypeError naming the call."""
    if not isinstance(m, dict) or not all(isinstance(k, Dim) and isinstance(v, Dim) for k, v in m.items()):
        raise TypeError(f"{caller}: {what} must be a dict of Dim to Dim, got {tp_name(m)}")


def tp_name(o) -> str:
    """The C-level name of o's type, as the C++ messages print it ("list", "dimtorch.Tensor",
    "numpy.ndarray"; a class defined in Python by its own name, e.g. torch's "Tensor")."""
    t = type(o)
    if t.__flags__ & (1 << 9) or t.__module__ == "builtins":  # Py_TPFLAGS_HEAPTYPE
        return t.__name__
    return f"{t.__module__}.{t.__qualname__}"


def describe_dims(dims, sizes=None, among=()) -> str:
    """`batch:3, time:5` with sizes, else `batch, feature(80)`: dims as the C++ messages list them
    (`#n` after a dim when another Dim object of its name is in dims or `among`)."""
    parts = []
    for i, d in enumerate(dims):
        name = d.name if d.name is not None else "<unnamed>"
        if sizes is not None:
            part = f"{name}:{sizes[i]}"
        elif d.size is not None and not dynamo_tracing():  # (Dynamo cannot format a traced size)
            part = f"{name}({d.size})"
        else:
            part = str(name)
        parts.append(part + d._message_id if has_namesake(d, (dims, among)) else part)
    return ", ".join(parts)


def is_scalar(o) -> bool:
    """A Python number that ops keep as a scalar (bool, int, float, complex, and their subclasses)."""
    return isinstance(o, (float, int, complex))


def bad_operand(o, caller: str) -> TypeError:
    if isinstance(o, torch.Tensor):
        return TypeError(f"{caller}: operand is a raw torch.Tensor of shape {o.shape}; wrap it with its dims: "
                         f"dimtorch.Tensor(raw, dims=(...))")
    return TypeError(f"{caller}: operands must be dimtorch.Tensor or Python scalars (bool, int, float, complex), "
                     f"got {tp_name(o)}")


def need_tensor(o, caller: str, what: str = "x") -> Tensor:
    if not isinstance(o, Tensor):
        raise TypeError(f"{caller}: {what} must be a dimtorch.Tensor, got {tp_name(o)}")
    return o


def flag(value, caller: str, name: str) -> bool:
    """Truth of a flag argument; a Tensor is refused (its truth would read device data)."""
    if type(value) is bool:  # (isinstance of torch.Tensor costs ~0.15 us)
        return value
    if isinstance(value, (Tensor, torch.Tensor)):
        raise TypeError(f"{caller}: {name} must be a bool, got a {tp_name(value)}")
    return bool(value)


def dims_tuple(arg, caller: str, what: str) -> tuple:
    """dims_arg with the wrong type named as the C++ core names it (src/core/tensor.cpp dims_arg_to_tuple),
    for the definitions of C++ ops, whose errors are the fast path's."""
    return dims_arg(arg, caller, what, tp_name)


def product(sizes):
    """The product of sizes (ints, or symbolic sizes while tracing); 1 for none."""
    out = 1
    for s in sizes:
        out = out * s
    return out


def index_of(dims: tuple, dim) -> int:
    """Index of `dim` in `dims` by identity, or -1."""
    for i, d in enumerate(dims):
        if d is dim:
            return i
    return -1


def axes_arg(x: Tensor, axis, caller: str) -> list:
    """x's axes named by `axis` (a Dim or a sequence of Dims), each once (src/ops/reduce.cpp axes_arg)."""
    dims = dims_tuple(axis, caller, "axis")
    if not dims:
        raise ValueError(f"{caller}: axis must name at least one dim")
    axes = []
    for d in dims:
        i = index_of(x.dims, d)
        if i < 0:
            raise ValueError(f"{caller}: dim {dim_str(d, x.dims)} is not in x "
                             f"(dims: {describe_dims(x.dims, x.raw.shape, d)}){namesakes_note(d, x.dims)}")
        if i in axes:
            raise ValueError(f"{caller}: dim {dim_str(d)} is given twice in axis")
        axes.append(i)
    return axes


def has_lengths(d: Dim) -> bool:
    """Whether d has per-sequence lengths (given, or derived by dim math from dims that have)."""
    return d.lengths is not None


def masked_by_reduction(x: Tensor, i: int, reduced) -> bool:
    """Whether dim i of x has padding to mask when reducing over x's axes `reduced`: a dim with
    lengths that is reduced itself, or whose lengths vary along a reduced dim."""
    d = x.dims[i]
    if not has_lengths(d):
        return False
    if i in reduced:
        return True
    return any(index_of(x.dims, b) in reduced for b in d.lengths.dims)


def check_lengths_dims(d: Dim, dims: tuple, caller: str) -> None:
    """The mask of d over `dims` needs the dims its lengths vary over (src/core/mask.cpp lengths_positions)."""
    for b in d.lengths.dims:
        if index_of(dims, b) < 0:
            among = (d, b, dims)
            raise ValueError(f"{caller}: the lengths of dim {dim_str(d, among)} are over {dim_str(b, among)}, which "
                             f"the tensor lacks (dims: {describe_dims(dims, None, among)}); add that dim (e.g. by "
                             f"broadcasting) first{namesakes_note(*among)}")


def valid_mask(x: Tensor, axes, caller: str):
    """Bool raw broadcastable to x's raw, True where none of x's dims at `axes` is in its padding
    (built in the graph from the lengths); None for no axes."""
    mask = None
    raw = x.raw
    for i in axes:
        d = x.dims[i]
        check_lengths_dims(d, x.dims, caller)
        m = mask_raw(d, x.dims, raw.shape, raw.device)
        mask = m if mask is None else mask & m
    return mask


def masked_raw(x: Tensor, axes, fill, caller: str):
    """(x's raw with the padding of its dims at `axes` replaced by `fill`, the mask or None)."""
    mask = valid_mask(x, axes, caller)
    if mask is None:
        return x.raw, None
    return torch.where(mask, x.raw, fill), mask


def padded_size(d: Dim, caller: str, beside=(), what: str = "dim"):
    """The raw size of a new tensor's axis over `d` (`beside`: that tensor's other dims): its static size,
    eagerly a dynamic dim's longest sequence (a host int the core keeps), while tracing the size bound in
    the trace (dimtorch._core.sizes.padded_size, which names the call when there is none)."""
    return _sizes.padded_size(d, caller, beside, what)


_INT32_ONES: dict = {}  # (shape, device) -> contiguous int32 ones; a few shapes kept


def int32_ones(shape, device, traced: bool) -> torch.Tensor:
    """Contiguous int32 ones of `shape` (the increments of a counting scatter_add_), cached per shape and
    device when eager: scatter_add_ from a contiguous source is ~2x faster than from an expanded 0-dim one,
    and making it each call costs ~1.5 us. While `traced` (tracing()), an expanded one (no cache of traced
    tensors)."""
    if traced:
        return torch.ones((), dtype=torch.int32, device=device).expand(shape)
    key = (tuple(shape), device)
    ones = _INT32_ONES.get(key)
    if ones is None:
        if len(_INT32_ONES) >= 64:  # batch shapes vary: keep the cache small
            _INT32_ONES.clear()
        ones = _INT32_ONES[key] = torch.ones(shape, dtype=torch.int32, device=device)
    return ones
