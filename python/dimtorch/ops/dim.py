"""The Python definition of the Dim type: construction, lengths of derived dims, dim math, methods.

dimtorch.Dim is a C++ type (src/core/dim.cpp, src/core/dim_math.cpp) whose slots and methods are the eager
fast paths; this is its semantics in Python, traced by torch.compile in their place (installed by
dimtorch._capture.compile) and checked against them by the tests. While tracing, lengths are graph
values: nothing here reads them on the host (no max, no min), and derived lengths are computed in
the graph by the Tensor ops.
"""
from __future__ import annotations

import torch

from .._C import Dim, Tensor, combine
from .._core import tracing as _tracing
from .._core.args import dim_str, dims_str
from .rf_dim import _mul_dims

_CTOR = "dimtorch.Dim()"

# The core's codes of the dim-math ops (src/core/dim.h DimOp), used in the dim-math cache's keys.
_OP_CODES = {"add": 1, "sub": 2, "mul": 3, "floordiv": 4, "ceildiv": 5, "concat": 6}
_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//"}


def __init__(self, size=None, name=None, *, dimension=None):
    """Dim(size=None, name=None): static (an int; while tracing also a symbolic size such as
    raw.shape[0]), size from data (None), or dynamic (an integer Tensor of lengths over batch dims)."""
    if dimension is not None:
        if size is not None:
            raise TypeError(f"{_CTOR} got multiple values for argument 'size'")
        size = dimension
    if name is not None and not isinstance(name, str):
        raise TypeError(f"{_CTOR}: name must be a str or None, got {type(name).__name__}")
    lengths = None
    if size is None:
        pass
    elif isinstance(size, torch.SymInt) or (_tracing.dynamo_tracing() and isinstance(size, int)):
        # A symbolic size while tracing, Dim(raw.shape[0]) (Dynamo reports a SymInt as an int): checked
        # in the graph, not on the host (a host `size < 0` would guard on, or fail for, unbacked sizes).
        torch._check(size >= 0, lambda: f"{_CTOR}: size must be >= 0")
    elif isinstance(size, int) and not isinstance(size, bool):
        if size < 0:
            raise ValueError(f"{_CTOR}: size must be >= 0, got {size}")
    elif isinstance(size, Tensor):
        if size.raw.dtype.is_floating_point or size.raw.dtype.is_complex or size.raw.dtype == torch.bool:
            raise TypeError(f"{_CTOR}: lengths must be an integer Tensor, got dtype {size.dtype} "
                            f"(dims: {dims_str(size.dims)})")
        for b in size.dims:
            if (b._lengths is not None or b.derivation is not None) and not _traced_pack_dim(b):
                raise ValueError(f"{_CTOR}: lengths must be over batch dims without lengths of their "
                                 f"own, but dim {dim_str(b)} has lengths (dims: {dims_str(size.dims)})")
        lengths, size = size, None
    elif isinstance(size, torch.Tensor):
        raise TypeError(f"{_CTOR}: lengths must be a dimtorch.Tensor over batch dims, e.g. "
                        f"dimtorch.Dim(dimtorch.Tensor(lengths, dims=(batch,)), name='time'); got a raw "
                        f"torch.Tensor")
    else:
        raise TypeError(f"{_CTOR}: size must be an int, None, or an integer dimtorch.Tensor of "
                        f"lengths, got {type(size).__name__}")
    # Every stored field is set, so that a traced Dim never reads an unset one from the core.
    self.name = name
    self.size = size
    self._lengths = lengths
    self.derivation = None
    self._math_cache = {}


def _traced_pack_dim(b) -> bool:
    """Whether b is a pack dim of a traced pack/masked_select (0-dim lengths: its valid frames are a prefix
    of its padded size): while tracing, lengths may vary over it, as eagerly over the static pack dim."""
    return b._lengths is not None and not b._lengths.dims and _tracing.tracing()


# ---- lengths and sizes ------------------------------------------------------------------------

def _has_lengths(dim) -> bool:
    if dim.size is not None:
        return False
    if dim._lengths is not None:
        return True
    derivation = dim.derivation
    if derivation is None:
        return False
    _, a, b, _ = derivation
    return _has_lengths(a) or (b is not None and _has_lengths(b))


def _operand(dim):
    """A dim-math operand as a number to compute with: its lengths (a Tensor, as int64: uint8 or int32
    lengths would wrap in T - 1 or T * k) or its static size."""
    lens = lengths(dim)
    if lens is not None:
        raw = lens.raw
        return lens if raw.dtype == torch.int64 else Tensor(raw.to(torch.int64), lens.dims)
    if dim.size is not None:
        return dim.size
    raise ValueError(f"dimtorch dim math: {dim_str(dim)} takes its size from data; derived lengths need "
                     f"lengths or a static size")


def _never_negative(op: str, k: int) -> bool:
    return {"add": k >= 0, "sub": k <= 0, "concat": True}.get(op, k > 0)


def lengths(self):
    """Lengths Tensor (over batch dims), or None: given at construction, or derived by dim math from
    the operands' lengths (int64, never below 0)."""
    if self._lengths is not None:
        return self._lengths
    derivation = self.derivation
    if derivation is None or not _has_lengths(self):
        return None
    op, a, b, k = derivation
    x = _operand(a)
    if op == "add":
        out = x + k
    elif op == "sub":
        out = x - k
    elif op == "mul":
        out = x * k
    elif op == "floordiv":
        out = x // k
    elif op == "ceildiv":
        out = (x + (k - 1)) // k
    else:  # concat: lengths over different batch dims broadcast to all of them
        y = _operand(b)
        if isinstance(x, Tensor) and isinstance(y, Tensor):
            out = combine(x, y, "add", allow_broadcast_all_sources=True)
        else:
            out = x + y
    raw = out.raw
    if not _never_negative(op, k):
        raw = raw.clamp_min(0)
    if raw.dtype != torch.int64:
        raw = raw.to(torch.int64)
    return Tensor(raw, out.dims)


def dimension(self):
    """Alias of size (RETURNN's name)."""
    return self.size


PROPERTIES = {"lengths": lengths, "dimension": dimension}


def is_static(self) -> bool:
    """Whether the size is known without data."""
    return self.size is not None


def is_dynamic(self) -> bool:
    """Whether the dim has per-sequence lengths."""
    return _has_lengths(self)


def get_max_size(self):
    """Max size as a host int: the static size; None for a dim whose size comes from data. While
    tracing, a dynamic dim's lengths are graph values, so their max is not known here."""
    if self.size is not None:
        return self.size
    if not _has_lengths(self):
        bound = self._bound_size  # a batch dim's size bound for the step (dimtorch.ops.rf_dim)
        return None if bound is None else int(bound.raw)
    raise RuntimeError(f"dimtorch.Dim.get_max_size(): {dim_str(self)} has lengths that are being "
                       f"traced, so their max is not known on the host; take the size of the raw axis "
                       f"of a tensor over this dim")


# ---- dim math --------------------------------------------------------------------------------

def _derived_name(a, op: str, k: int, b) -> str:
    an = a.name if a.name is not None else "?"
    if op == "concat":
        return f"{an}+{b.name if b.name is not None else '?'}"
    if op == "ceildiv":
        return f"ceildiv({an},{k})"
    return f"{an}{_SYMBOLS[op]}{k}"


def _static_result(op: str, a: int, k: int, b: int) -> int:
    if op == "concat":
        return a + b
    if op in ("floordiv", "ceildiv"):
        return a // k if op == "floordiv" else -(-a // k)
    return a + k if op == "add" else a - k if op == "sub" else a * k


_INT64 = (-2**63, 2**63 - 1)


def _overflow(a, op: str, k: int, b, caller: str) -> OverflowError:
    """The core's error for dim math past int64 (src/core/dim_math.cpp overflow_error)."""
    symbol = "+" if op == "concat" else "ceildiv" if op == "ceildiv" else _SYMBOLS[op]
    rhs = dim_str(b) if op == "concat" else str(k)
    return OverflowError(f"{caller}: {dim_str(a)} {symbol} {rhs} overflows (a size is at most 2**63 - 1)")


def derive(a, op: str, k: int, b, caller: str):
    """The dim `a <op> k` (or a + b for concat), cached on `a`: the same expression twice gives the
    same Dim. Identities give `a` itself; a chain of one op folds (T + 1) + 2 into T + 3."""
    if op in ("floordiv", "ceildiv", "mul") and k <= 0:
        raise ValueError(f"{caller}: factor must be a positive int, got {k} (dim {dim_str(a)})")
    if (op in ("add", "sub") and k == 0) or (op in ("mul", "floordiv", "ceildiv") and k == 1):
        return a
    if op in ("add", "sub") and k == _INT64[0]:
        raise _overflow(a, op, k, b, caller)
    if op == "add" and k < 0:
        return derive(a, "sub", -k, b, caller)
    if op == "sub" and k < 0:
        return derive(a, "add", -k, b, caller)
    a_derivation = a.derivation
    if b is None and op != "concat" and a_derivation is not None and a_derivation[0] == op:
        a_op, a_a, _, a_k = a_derivation
        folded = a_k + k if op in ("add", "sub") else a_k * k
        if not _INT64[0] <= folded <= _INT64[1]:
            raise _overflow(a, op, k, b, caller)
        return derive(a_a, op, folded, None, caller)
    if a.size is not None and op == "sub" and a.size < k:
        raise ValueError(f"{caller}: {dim_str(a)} - {k} would have a negative size")
    if op == "concat":
        a_from_data = a.size is None and not _has_lengths(a)
        b_from_data = b.size is None and not _has_lengths(b)
        if a_from_data != b_from_data:
            raise ValueError(f"{caller}: {dim_str(a)} + {dim_str(b)}: a dim whose size comes from data "
                             f"has neither a static size nor lengths to add")
    cache = a._math_cache
    key = (_OP_CODES[op], b if op == "concat" else k)
    hit = cache.get(key)
    if hit is not None:
        return hit
    static = a.size is not None and (op != "concat" or b.size is not None)
    size = _static_result(op, a.size, k, b.size if b is not None else 0) if static else None
    if size is not None and size > _INT64[1]:
        raise _overflow(a, op, k, b, caller)
    d = object.__new__(Dim)
    d.name = _derived_name(a, op, k, b)
    d.size = size
    d._lengths = None
    d.derivation = (op, a, b, k)
    d._math_cache = {}
    cache[key] = d
    return d


def merged_dim(dims: tuple):
    """The static Dim that merging the static `dims` gives (dimtorch._C._merged_dim): cached on the
    first, so that merging the same dims again gives the same Dim. While tracing, a merge made first
    in the graph is cached on a Dim made in the graph (not on one made outside it)."""
    if not isinstance(dims, tuple) or not dims:
        raise TypeError("dimtorch._C._merged_dim(dims): dims must be a non-empty tuple of Dims")
    for d in dims:
        if not isinstance(d, Dim) or d.size is None:
            raise ValueError(f"dimtorch._C._merged_dim(dims): every dim must be static, got {d!r}")
    cache = dims[0]._math_cache
    key = ("merge", dims[1:])
    hit = cache.get(key)
    if hit is not None:
        return hit
    total = 1
    for d in dims:
        total *= d.size
    d = Dim(total, name="*".join(str(e.name) for e in dims))
    cache[key] = d
    return d


def _int_operand(o) -> bool:
    return isinstance(o, int) and not isinstance(o, bool)


def __add__(self, other):
    if isinstance(other, Dim):
        return derive(self, "concat", 0, other, "dimtorch.Dim.__add__()")
    if _int_operand(other):
        return derive(self, "add", other, None, "dimtorch.Dim.__add__()")
    return NotImplemented


def __radd__(self, other):
    if _int_operand(other):
        return derive(self, "add", other, None, "dimtorch.Dim.__radd__()")
    return NotImplemented


def __sub__(self, other):
    if _int_operand(other):
        return derive(self, "sub", other, None, "dimtorch.Dim.__sub__()")
    return NotImplemented


def __mul__(self, other):
    if isinstance(other, Dim):  # RETURNN's product of dims, as the C slot makes it (its definition)
        return _mul_dims(self, other)
    if _int_operand(other):
        return derive(self, "mul", other, None, "dimtorch.Dim.__mul__()")
    return NotImplemented


def __rmul__(self, other):
    if _int_operand(other):
        return derive(self, "mul", other, None, "dimtorch.Dim.__rmul__()")
    return NotImplemented


def __floordiv__(self, other):
    if _int_operand(other):
        return derive(self, "floordiv", other, None, "dimtorch.Dim.__floordiv__()")
    return NotImplemented


def ceildiv(dim, k, /):
    """ceildiv(dim, k): the dim of ceil(size / k) frames (strided conv/pool output). Positional, as the
    C++ fast path takes it."""
    if not isinstance(dim, Dim) or not _int_operand(k):
        raise TypeError("dimtorch.ceildiv(): expected (Dim, int)")
    return derive(dim, "ceildiv", k, None, "dimtorch.ceildiv()")


OPERATORS = {"__add__": __add__, "__radd__": __radd__, "__sub__": __sub__, "__mul__": __mul__,
             "__rmul__": __rmul__, "__floordiv__": __floordiv__}
METHODS = {"is_static": is_static, "is_dynamic": is_dynamic, "get_max_size": get_max_size}
