"""Definitions of the elementwise ops (src/ops/elementwise.cpp): combine, compare, where, clip, cast, the unary functions, and Tensor's operators; and the Python-only ones of rf (is_infinite, is_neg_infinite, expm1, elu, selu, lerp)."""
from __future__ import annotations

import operator

import torch
import torch.nn.functional as F

from .. import _C
from .._C import Tensor
from .._core.dtypes import dtype_from, is_integer
from .._core.args import dim_str, namesakes_note
from ._support import (
    MAX_DIMS, bad_operand, describe_dims, flag, index_of, is_scalar, names_errors, tp_name,
)


# ---- alignment by dim identity (src/core/plan.cpp) ------------------------------------------------

# Whether an outer broadcast of an operator (or of combine/compare without allow_broadcast_all_sources) is
# allowed: RETURNN's rule, which dimtorch.rf turns on. The C++ core keeps its own copy; this one is what the
# definitions read (a plain global: torch.compile traces it as a constant, where it could not call into _C).
_operators_broadcast_all = False


def set_operators_broadcast_all_sources(enabled: bool) -> bool:
    """Sets the rule for the C++ ops and the definitions alike; returns the previous setting."""
    global _operators_broadcast_all
    previous = _C._set_operators_broadcast_all_sources(bool(enabled))
    _operators_broadcast_all = bool(enabled)
    return previous


def _aligned_raw(t: Tensor, out_dims: tuple):
    """t's raw viewed to broadcast against a raw over `out_dims`. A 0-dim raw stays 0-dim: torch's
    type promotion treats it as a scalar-like operand, a size-1 view of it would not be."""
    if not t.dims or t.dims == out_dims:
        return t.raw
    return t.raw_aligned(out_dims)


def _plan(tensors: list, names: list, allow_broadcast_all: bool, caller: str, by_rule: bool = False):
    """(out dims, index of the operand whose dims they are or -1) for Tensors aligned by dim
    identity: the first operand that holds all dims of the others; else, where allowed (or, with
    `by_rule`, where the process's operators_broadcast_all_sources rule allows it: dimtorch.rf's),
    every dim in order of appearance. Checks that dims which are not static have one raw size."""
    holder = -1
    for i, t in enumerate(tensors):
        if all(all(index_of(t.dims, d) >= 0 for d in u.dims) for j, u in enumerate(tensors) if j != i):
            holder = i
            break
    if holder >= 0:
        out_dims = tensors[holder].dims
    elif not allow_broadcast_all and not (by_rule and _operators_broadcast_all
                                          and not namesakes_note(*[t.dims for t in tensors])):
        all_dims = [t.dims for t in tensors]
        ops = "; ".join(f"{n}: ({describe_dims(t.dims, None, all_dims)})" for n, t in zip(names, tensors))
        note = namesakes_note(*all_dims)
        if note:  # allow_broadcast_all_sources would silently make a product of the two axes
            raise ValueError(f"{caller}: no operand has all dims of the others ({ops}){note}: use one Dim "
                             f"object per axis (a Dim is its identity, not its name)")
        raise ValueError(f"{caller}: no operand has all dims of the others ({ops}). This outer broadcast is "
                         f"usually a bug; if it is intended, use dimtorch.combine(..., "
                         f"allow_broadcast_all_sources=True)")
    else:
        out = []
        for t in tensors:
            out.extend(d for d in t.dims if index_of(tuple(out), d) < 0)
        out_dims = tuple(out)
    if len(out_dims) > MAX_DIMS:
        raise ValueError(f"{caller}: at most {MAX_DIMS} dims are supported, the result would have {len(out_dims)}")
    # Each output size comes from the holder, else from the first operand with the dim; the other
    # operands must agree on dims whose size is not static (checked in operand order).
    order = ([holder] if holder >= 0 else []) + [i for i in range(len(tensors)) if i != holder]
    for i, t in enumerate(tensors):
        for j, d in enumerate(t.dims):
            if d.size is not None:
                continue
            si = [k for k in order if index_of(tensors[k].dims, d) >= 0][0]
            if si == i:
                continue
            sj = index_of(tensors[si].dims, d)
            s, a = tensors[si], t
            if s.raw.shape[sj] != a.raw.shape[j]:
                raise ValueError(
                    f"{caller}: dim {dim_str(d)} has raw size {s.raw.shape[sj]} in {names[si]} but "
                    f"{a.raw.shape[j]} in {names[i]} ({names[si]} dims: {describe_dims(s.dims, s.raw.shape)}; "
                    f"{names[i]} dims: {describe_dims(a.dims, a.raw.shape)})")
    return out_dims, holder


def align(operands: list, names: list, allow_broadcast_all: bool, allow_none: bool, caller: str):
    """Operands (Tensors, Python scalars, or None where allowed) aligned to one output: (raws and
    scalars to hand to torch, out dims, feature dim) (src/ops/elementwise.cpp align_operands)."""
    tensors, tnames = [], []
    for o, n in zip(operands, names):
        if isinstance(o, Tensor):
            tensors.append(o)
            tnames.append(n)
        elif not (is_scalar(o) or (allow_none and o is None)):
            raise bad_operand(o, caller)
    if not tensors:
        raise TypeError(f"{caller}: at least one operand must be a dimtorch.Tensor")
    features = [t.feature_dim for t in tensors if t.feature_dim is not None]
    feature = features[0] if features else None
    if len(tensors) == 1:
        return [o.raw if isinstance(o, Tensor) else o for o in operands], tensors[0].dims, feature
    out_dims, holder = _plan(tensors, tnames, allow_broadcast_all, caller)
    if holder >= 0 and tensors[holder].feature_dim is not None:
        feature = tensors[holder].feature_dim
    args = [_aligned_raw(o, out_dims) if isinstance(o, Tensor) else o for o in operands]
    return args, out_dims, feature


# ---- binary ops ------------------------------------------------------------------------------

def _maximum(a, b):
    # With a scalar, clamp is the one-call equivalent (torch.maximum takes tensors only).
    if not isinstance(a, torch.Tensor):
        return torch.clamp_min(b, a)
    if not isinstance(b, torch.Tensor):
        return torch.clamp_min(a, b)
    return torch.maximum(a, b)


def _minimum(a, b):
    if not isinstance(a, torch.Tensor):
        return torch.clamp_max(b, a)
    if not isinstance(b, torch.Tensor):
        return torch.clamp_max(a, b)
    return torch.minimum(a, b)


def _as_raw(v):
    # torch's logical ops take tensors only; a 0-dim tensor broadcasts anywhere.
    return v if isinstance(v, torch.Tensor) else torch.as_tensor(v)


_RAW_BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow,
    "bitwise_and": operator.and_, "bitwise_or": operator.or_, "bitwise_xor": operator.xor,
    "equal": operator.eq, "not_equal": operator.ne, "less": operator.lt, "less_equal": operator.le,
    "greater": operator.gt, "greater_equal": operator.ge,
    "maximum": _maximum, "minimum": _minimum,
    "logical_and": lambda a, b: torch.logical_and(_as_raw(a), _as_raw(b)),
    "logical_or": lambda a, b: torch.logical_or(_as_raw(a), _as_raw(b)),
    "squared_difference": lambda a, b: torch.square(a - b),
    "logaddexp": lambda a, b: torch.logaddexp(_as_raw(a), _as_raw(b)),
}
_COMPARISONS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
_LOGICAL = ("logical_and", "logical_or")

# Names (and operator symbols) that combine and compare take, in the C++ tables' order.
_COMBINE_KINDS = {
    "add": "add", "+": "add", "sub": "sub", "-": "sub", "mul": "mul", "*": "mul", "truediv": "truediv",
    "/": "truediv", "floordiv": "floordiv", "//": "floordiv", "mod": "mod", "%": "mod", "pow": "pow",
    "**": "pow", "maximum": "maximum", "max": "maximum", "minimum": "minimum", "min": "minimum",
    "logical_and": "logical_and", "logical_or": "logical_or", "bitwise_and": "bitwise_and",
    "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor", "squared_difference": "squared_difference",
    "logaddexp": "logaddexp",
}
_COMPARE_KINDS = {
    "equal": "equal", "==": "equal", "not_equal": "not_equal", "!=": "not_equal", "less": "less",
    "<": "less", "less_equal": "less_equal", "<=": "less_equal", "greater": "greater", ">": "greater",
    "greater_equal": "greater_equal", ">=": "greater_equal",
}


def binary(kind: str, a, b, allow_broadcast_all_sources: bool, caller: str, by_rule: bool = False) -> Tensor:
    """a <kind> b for Tensors and Python scalars (at least one Tensor), aligned by dims; `kind` one
    of the canonical names of _RAW_BINARY; errors name `caller`. The definition of combine, compare,
    maximum, minimum, logical_and/or and of Tensor's operators. `by_rule`: an outer broadcast follows
    the process's rule (operators; combine/compare without allow_broadcast_all_sources)."""
    fn = _RAW_BINARY[kind]
    keep_sparse = kind not in _COMPARISONS and kind not in _LOGICAL
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        sparse = a.sparse_dim if keep_sparse and a.sparse_dim is b.sparse_dim else None
        if len(a.dims) == len(b.dims) and all(x is y for x, y in zip(a.dims, b.dims)):
            for i, d in enumerate(a.dims):
                if a.raw.shape[i] != b.raw.shape[i]:
                    raise ValueError(f"{caller}: dim {dim_str(d)} has raw size {a.raw.shape[i]} in a but "
                                     f"{b.raw.shape[i]} in b (dims: {describe_dims(a.dims)})")
            feature = a.feature_dim if a.feature_dim is not None else b.feature_dim
            return Tensor(fn(a.raw, b.raw), a.dims, sparse_dim=sparse, feature_dim=feature)
        out_dims, holder = _plan([a, b], ["a", "b"], allow_broadcast_all_sources, caller, by_rule)
        raw = fn(_aligned_raw(a, out_dims), _aligned_raw(b, out_dims))
        h = (a, b)[holder] if holder >= 0 else None
        feature = (h.feature_dim if h is not None and h.feature_dim is not None
                   else a.feature_dim if a.feature_dim is not None else b.feature_dim)
        return Tensor(raw, out_dims, sparse_dim=sparse, feature_dim=feature)
    if isinstance(a, Tensor) and is_scalar(b):
        return Tensor(fn(a.raw, b), a.dims, sparse_dim=a.sparse_dim if keep_sparse else None,
                      feature_dim=a.feature_dim)
    if isinstance(b, Tensor) and is_scalar(a):
        return Tensor(fn(a, b.raw), b.dims, sparse_dim=b.sparse_dim if keep_sparse else None,
                      feature_dim=b.feature_dim)
    if is_scalar(a) and is_scalar(b):
        raise TypeError(f"{caller}: at least one operand must be a dimtorch.Tensor")
    raise bad_operand(b if isinstance(a, Tensor) else a, caller)


def _kind(table: dict, kind, caller: str) -> str:
    if not isinstance(kind, str):
        raise TypeError(f"{caller}: kind must be a str, got {tp_name(kind)}")
    try:
        return table[kind]
    except KeyError:
        raise ValueError(f"{caller}: unknown kind {kind!r} (known: {', '.join(table)})") from None


def _kind_last(b, kind):
    """(b, kind) of a call in either order: dimtorch's (a, b, kind) or RETURNN frontend's (a, kind, b)."""
    return (kind, b) if isinstance(b, str) and not isinstance(kind, str) else (b, kind)


def _in_dim_order(out: Tensor, dim_order, caller: str) -> Tensor:
    """out transposed to RETURNN frontend's dim_order (its dims in that order, the rest after)."""
    if dim_order is None:
        return out
    order = [d for d in dim_order if any(d is e for e in out.dims)]
    order += [d for d in out.dims if not any(d is e for e in order)]
    return out if tuple(order) == out.dims else out.copy_transpose(tuple(order))


@names_errors("dimtorch.combine()")
def combine(a, b, kind, /, *, allow_broadcast_all_sources=None, dim_order=None) -> Tensor:
    """Elementwise a <kind> b aligned by dims. kind: add, sub, mul, truediv, floordiv, mod, pow,
    maximum, minimum, logical_and, logical_or, bitwise_and/or/xor (or the operator symbol).
    RETURNN frontend's order combine(a, kind, b) works too (the str is the kind).
    The output keeps the dims order of the first operand that holds all dims (raws of the others
    are views aligned to it); without one, an error unless allow_broadcast_all_sources (None:
    False; then a's dims followed by b's others). `dim_order`: the output's dims in this order
    (those it names; the others after). Python scalars stay scalars."""
    caller = "dimtorch.combine()"
    b, kind = _kind_last(b, kind)
    k = _kind(_COMBINE_KINDS, kind, caller)
    out = binary(k, a, b, flag(False if allow_broadcast_all_sources is None else allow_broadcast_all_sources, caller,
                                  "allow_broadcast_all_sources"), caller, allow_broadcast_all_sources is None)
    return _in_dim_order(out, dim_order, caller) if isinstance(out, Tensor) else out


@names_errors("dimtorch.compare()")
def compare(a, b, kind, /, *, allow_broadcast_all_sources=None, dim_order=None) -> Tensor:
    """Bool Tensor a <kind> b aligned by dims. kind: equal, not_equal, less, less_equal, greater,
    greater_equal (or ==, !=, <, <=, >, >=). RETURNN frontend's order compare(a, kind, b) works too;
    allow_broadcast_all_sources and dim_order as in combine."""
    caller = "dimtorch.compare()"
    b, kind = _kind_last(b, kind)
    k = _kind(_COMPARE_KINDS, kind, caller)
    out = binary(k, a, b, flag(False if allow_broadcast_all_sources is None else allow_broadcast_all_sources, caller,
                                  "allow_broadcast_all_sources"), caller, allow_broadcast_all_sources is None)
    return _in_dim_order(out, dim_order, caller) if isinstance(out, Tensor) else out


@names_errors("dimtorch.maximum()")
def maximum(a, b, *other_tensors, allow_broadcast_all_sources=False) -> Tensor:
    """Elementwise maximum, aligned by dims; more operands (RETURNN frontend's *other_tensors) fold
    left to right."""
    caller = "dimtorch.maximum()"
    allow = flag(allow_broadcast_all_sources, caller, "allow_broadcast_all_sources")
    out = binary("maximum", a, b, allow, caller)
    for c in other_tensors:
        out = binary("maximum", out, c, allow, caller)
    return out


@names_errors("dimtorch.minimum()")
def minimum(a, b, *other_tensors, allow_broadcast_all_sources=False) -> Tensor:
    """Elementwise minimum, aligned by dims; more operands fold left to right."""
    caller = "dimtorch.minimum()"
    allow = flag(allow_broadcast_all_sources, caller, "allow_broadcast_all_sources")
    out = binary("minimum", a, b, allow, caller)
    for c in other_tensors:
        out = binary("minimum", out, c, allow, caller)
    return out


@names_errors("dimtorch.logical_and()")
def logical_and(a, b, *, allow_broadcast_all_sources=False) -> Tensor:
    """Elementwise logical and (bool), aligned by dims."""
    caller = "dimtorch.logical_and()"
    return binary("logical_and", a, b, flag(allow_broadcast_all_sources, caller, "allow_broadcast_all_sources"),
                  caller)


@names_errors("dimtorch.logical_or()")
def logical_or(a, b, *, allow_broadcast_all_sources=False) -> Tensor:
    """Elementwise logical or (bool), aligned by dims."""
    caller = "dimtorch.logical_or()"
    return binary("logical_or", a, b, flag(allow_broadcast_all_sources, caller, "allow_broadcast_all_sources"),
                  caller)


@names_errors("dimtorch.squared_difference()")
def squared_difference(a, b, *, allow_broadcast_all_sources=False) -> Tensor:
    """(a - b) ** 2 elementwise, aligned by dims (rf.squared_difference)."""
    caller = "dimtorch.squared_difference()"
    return binary("squared_difference", a, b,
                  flag(allow_broadcast_all_sources, caller, "allow_broadcast_all_sources"), caller)


@names_errors("dimtorch.log_add_exp()")
def log_add_exp(a, b, *, allow_broadcast_all_sources=False) -> Tensor:
    """log(exp(a) + exp(b)) elementwise, stable (torch.logaddexp), aligned by dims."""
    caller = "dimtorch.log_add_exp()"
    return binary("logaddexp", a, b, flag(allow_broadcast_all_sources, caller, "allow_broadcast_all_sources"),
                  caller)


# ---- where, clip, cast -------------------------------------------------------------------------

@names_errors("dimtorch.where()")
def where(condition, true_value, false_value, /, *, allow_broadcast_all_sources=False) -> Tensor:
    """torch.where with the three operands aligned by dims; the values may be Tensors or Python
    scalars. The values' sparse dim survives when both values share it (or one is a scalar)."""
    caller = "dimtorch.where()"
    allow = flag(allow_broadcast_all_sources, caller, "allow_broadcast_all_sources")
    if not isinstance(condition, Tensor):
        if isinstance(condition, torch.Tensor):
            raise bad_operand(condition, caller)
        raise TypeError(f"{caller}: condition must be a bool dimtorch.Tensor, got {tp_name(condition)}")
    (c, t, f), out_dims, feature = align([condition, true_value, false_value],
                                         ["condition", "true_value", "false_value"], allow, False, caller)
    raw = torch.where(c, t, f)
    sa = true_value.sparse_dim if isinstance(true_value, Tensor) else None
    sb = false_value.sparse_dim if isinstance(false_value, Tensor) else None
    sparse = None
    if sa is not None and (sa is sb or not isinstance(false_value, Tensor)):
        sparse = sa
    elif sb is not None and not isinstance(true_value, Tensor):
        sparse = sb
    return Tensor(raw, out_dims, sparse_dim=sparse, feature_dim=feature)


def _not_a_tensor(o, caller: str) -> TypeError:
    if isinstance(o, torch.Tensor):
        return bad_operand(o, caller)
    return TypeError(f"{caller}: expected a dimtorch.Tensor, got {tp_name(o)}")


@names_errors("dimtorch.clip()")
def clip(x, min=None, max=None, *, allow_broadcast_all_sources=False) -> Tensor:  # noqa: A002 (torch's names)
    """torch.clamp of x to [min, max], bounds (Tensors, Python scalars or None) aligned by dims.
    A Tensor bound with a scalar one is applied in clamp's order: min first, then max."""
    caller = "dimtorch.clip()"
    if not isinstance(x, Tensor):
        raise _not_a_tensor(x, caller)
    if min is None and max is None:
        raise ValueError(f"{caller}: give min, max or both (both are None)")
    allow = flag(allow_broadcast_all_sources, caller, "allow_broadcast_all_sources")
    (raw, lo, hi), out_dims, feature = align([x, min, max], ["x", "min", "max"], allow, True, caller)
    # torch.clamp takes two tensor bounds or two number bounds, not one of each.
    if isinstance(min, Tensor) and is_scalar(max):
        raw = torch.clamp_max(torch.clamp(raw, lo, None), hi)
    elif is_scalar(min) and isinstance(max, Tensor):
        raw = torch.clamp(torch.clamp_min(raw, lo), None, hi)
    else:
        raw = torch.clamp(raw, lo, hi)
    return Tensor(raw, out_dims, sparse_dim=x.sparse_dim, feature_dim=feature)


@names_errors("dimtorch.cast()")
def cast(x, /, dtype) -> Tensor:
    """x with the raw converted to `dtype` (a name or a torch.dtype); an integer result keeps x's sparse dim."""
    caller = "dimtorch.cast()"
    if not isinstance(x, Tensor):
        raise _not_a_tensor(x, caller)
    torch_dtype = dtype_from(dtype, caller)
    return Tensor(x.raw.to(torch_dtype), x.dims, sparse_dim=x.sparse_dim if is_integer(torch_dtype) else None,
                  feature_dim=x.feature_dim)


# ---- unary functions (the table of src/core/backend.cpp) --------------------------------------------

def _unary(fn, x, caller: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise _not_a_tensor(x, caller)
    return Tensor(fn(x.raw), x.dims, feature_dim=x.feature_dim)


@names_errors("dimtorch.exp()")
def exp(x, /) -> Tensor:
    return _unary(torch.exp, x, "dimtorch.exp()")


@names_errors("dimtorch.log()")
def log(x, /) -> Tensor:
    return _unary(torch.log, x, "dimtorch.log()")


@names_errors("dimtorch.log1p()")
def log1p(x, /) -> Tensor:
    return _unary(torch.log1p, x, "dimtorch.log1p()")


@names_errors("dimtorch.sqrt()")
def sqrt(x, /) -> Tensor:
    return _unary(torch.sqrt, x, "dimtorch.sqrt()")


@names_errors("dimtorch.rsqrt()")
def rsqrt(x, /) -> Tensor:
    return _unary(torch.rsqrt, x, "dimtorch.rsqrt()")


@names_errors("dimtorch.square()")
def square(x, /) -> Tensor:
    return _unary(torch.square, x, "dimtorch.square()")


@names_errors("dimtorch.tanh()")
def tanh(x, /) -> Tensor:
    return _unary(torch.tanh, x, "dimtorch.tanh()")


@names_errors("dimtorch.sigmoid()")
def sigmoid(x, /) -> Tensor:
    return _unary(torch.sigmoid, x, "dimtorch.sigmoid()")


@names_errors("dimtorch.relu()")
def relu(x, /) -> Tensor:
    return _unary(torch.relu, x, "dimtorch.relu()")


@names_errors("dimtorch.gelu()")
def gelu(x, /) -> Tensor:
    return _unary(F.gelu, x, "dimtorch.gelu()")


@names_errors("dimtorch.silu()")
def silu(x, /) -> Tensor:
    return _unary(F.silu, x, "dimtorch.silu()")


@names_errors("dimtorch.softplus()")
def softplus(x, /) -> Tensor:
    return _unary(F.softplus, x, "dimtorch.softplus()")


@names_errors("dimtorch.sin()")
def sin(x, /) -> Tensor:
    return _unary(torch.sin, x, "dimtorch.sin()")


@names_errors("dimtorch.cos()")
def cos(x, /) -> Tensor:
    return _unary(torch.cos, x, "dimtorch.cos()")


@names_errors("dimtorch.floor()")
def floor(x, /) -> Tensor:
    return _unary(torch.floor, x, "dimtorch.floor()")


@names_errors("dimtorch.ceil()")
def ceil(x, /) -> Tensor:
    return _unary(torch.ceil, x, "dimtorch.ceil()")


@names_errors("dimtorch.round()")
def round(x, /) -> Tensor:  # noqa: A001 (the public name)
    return _unary(torch.round, x, "dimtorch.round()")


@names_errors("dimtorch.is_finite()")
def is_finite(x, /) -> Tensor:
    return _unary(torch.isfinite, x, "dimtorch.is_finite()")


@names_errors("dimtorch.logical_not()")
def logical_not(x, /) -> Tensor:
    return _unary(torch.logical_not, x, "dimtorch.logical_not()")


@names_errors("dimtorch.abs()")
def abs(x, /) -> Tensor:  # noqa: A001 (the public name)
    return _unary(torch.abs, x, "dimtorch.abs()")


@names_errors("dimtorch.log_sigmoid()")
def log_sigmoid(x, /) -> Tensor:
    return _unary(torch.nn.functional.logsigmoid, x, "dimtorch.log_sigmoid()")


@names_errors("dimtorch.neg()")
def neg(x, /) -> Tensor:
    return _unary(torch.neg, x, "dimtorch.neg()")


# ---- Python-only elementwise ops (rf names; no C++ fast path) ---------------------------------------

@names_errors("dimtorch.is_infinite()")
def is_infinite(x, /) -> Tensor:
    """Bool: x is +inf or -inf."""
    return _unary(torch.isinf, x, "dimtorch.is_infinite()")


@names_errors("dimtorch.is_neg_infinite()")
def is_neg_infinite(x, /) -> Tensor:
    """Bool: x is -inf."""
    return _unary(torch.isneginf, x, "dimtorch.is_neg_infinite()")


@names_errors("dimtorch.expm1()")
def expm1(x, /) -> Tensor:
    """exp(x) - 1, accurate near 0."""
    return _unary(torch.expm1, x, "dimtorch.expm1()")


@names_errors("dimtorch.elu()")
def elu(x, /) -> Tensor:
    """ELU with alpha 1 (F.elu)."""
    return _unary(F.elu, x, "dimtorch.elu()")


@names_errors("dimtorch.selu()")
def selu(x, /) -> Tensor:
    """SELU (F.selu)."""
    return _unary(F.selu, x, "dimtorch.selu()")


@names_errors("dimtorch.lerp()")
def lerp(start, end, weight, *, allow_broadcast_all_sources=False) -> Tensor:
    """start + weight * (end - start) (rf.lerp; torch.lerp where the dtypes allow it), the three aligned by
    dims; start and end are Tensors, weight a Python number or a Tensor."""
    caller = "dimtorch.lerp()"
    allow = flag(allow_broadcast_all_sources, caller, "allow_broadcast_all_sources")
    for what, v in (("start", start), ("end", end)):
        if not isinstance(v, Tensor):
            raise TypeError(f"{caller}: {what} must be a dimtorch.Tensor, got {tp_name(v)}")
    if not (isinstance(weight, Tensor) or (is_scalar(weight) and not isinstance(weight, bool))):
        raise TypeError(f"{caller}: weight must be a number or a dimtorch.Tensor, got {tp_name(weight)}")
    (a, b, w), out_dims, feature = align([start, end, weight], ["start", "end", "weight"], allow, False, caller)
    same = a.dtype == b.dtype and a.is_floating_point() and (not isinstance(w, torch.Tensor) or w.dtype == a.dtype)
    raw = torch.lerp(a, b, w) if same else a + w * (b - a)
    return Tensor(raw, out_dims, feature_dim=feature)


# ---- Tensor's operators (the number slots and rich comparison of the C++ type) ----------------

def _operator(kind: str, symbol: str, reflected: bool = False):
    """Tensor.__<symbol>__ (or its reflected form) as the C++ slot computes it: the slot gets the
    operands in expression order, and its errors name the forward method either way."""
    caller = f"dimtorch.Tensor.__{symbol}__()"

    @names_errors(caller)
    def method(self, other):
        a, b = (other, self) if reflected else (self, other)
        return binary(kind, a, b, False, caller, True)
    method.__name__ = method.__qualname__ = f"__r{symbol}__" if reflected else f"__{symbol}__"
    return method


def _pow(reflected: bool):
    caller = "dimtorch.Tensor.__pow__()"

    @names_errors(caller)
    def method(self, other, mod=None):
        if mod is not None:
            raise TypeError(f"{caller}: a modulus is not supported")
        a, b = (other, self) if reflected else (self, other)
        return binary("pow", a, b, False, caller, True)
    method.__name__ = method.__qualname__ = "__rpow__" if reflected else "__pow__"
    return method


def _unary_operator(fn, name: str):
    @names_errors("dimtorch.Tensor")
    def method(self):
        return Tensor(fn(self.raw), self.dims, feature_dim=self.feature_dim)
    method.__name__ = method.__qualname__ = name
    return method


def _pos(self):
    return self


TENSOR_OPERATORS = {}
"""Tensor's operator methods by name (__add__, __radd__, ..., __eq__, ..., __neg__): each gives
what the C++ slot gives, for a Tensor with a Tensor or a Python scalar in either order."""
for _kind_name, _symbol in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "truediv"),
                            ("floordiv", "floordiv"), ("mod", "mod"), ("bitwise_and", "and"),
                            ("bitwise_or", "or"), ("bitwise_xor", "xor")]:
    TENSOR_OPERATORS[f"__{_symbol}__"] = _operator(_kind_name, _symbol)
    TENSOR_OPERATORS[f"__r{_symbol}__"] = _operator(_kind_name, _symbol, reflected=True)
for _kind_name, _symbol in [("less", "lt"), ("less_equal", "le"), ("equal", "eq"), ("not_equal", "ne"),
                            ("greater", "gt"), ("greater_equal", "ge")]:
    TENSOR_OPERATORS[f"__{_symbol}__"] = _operator(_kind_name, _symbol)
TENSOR_OPERATORS["__pow__"] = _pow(reflected=False)
TENSOR_OPERATORS["__rpow__"] = _pow(reflected=True)
TENSOR_OPERATORS["__neg__"] = _unary_operator(operator.neg, "__neg__")
TENSOR_OPERATORS["__abs__"] = _unary_operator(operator.abs, "__abs__")
TENSOR_OPERATORS["__invert__"] = _unary_operator(operator.invert, "__invert__")
TENSOR_OPERATORS["__pos__"] = _pos
del _kind_name, _symbol
