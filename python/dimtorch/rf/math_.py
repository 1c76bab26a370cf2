"""rf.math_: RETURNN frontend's elementwise math. Each name is dimtorch's op itself (the same object) or
Python's operator function (a + b goes straight to Tensor's C number slot); a few spelled otherwise in
dimtorch are thin functions."""
from __future__ import annotations

import operator as _operator
from typing import Union

import dimtorch as _dt
from dimtorch import Tensor

__all__ = [
    "compare", "compare_bc", "combine", "combine_bc", "equal", "not_equal", "less", "less_equal", "greater",
    "greater_equal", "add", "sub", "mul", "true_divide", "floor_divide", "ceil_divide", "neg", "reciprocal", "mod",
    "pow", "squared_difference", "logical_and", "logical_or", "logical_not", "opt_logical_or", "opt_logical_and",
    "log_add_exp", "is_finite", "is_infinite", "is_neg_infinite", "maximum", "minimum", "clip_by_value", "identity",
    "exp", "expm1", "log", "safe_log", "log1p", "sqrt", "rsqrt", "square", "abs", "tanh", "sigmoid", "log_sigmoid",
    "sin", "cos", "ceil", "floor", "round", "relu", "relu_square", "elu", "selu", "silu", "swish", "gelu", "softmax",
    "log_softmax", "gating", "lerp", "cumsum",
]

# combine/compare take rf's order (a, kind, b) as well as dimtorch's (a, b, kind)
compare = _dt.compare
combine = _dt.combine

# the operators: Tensor's number slots (C++), no Python frame
equal = _operator.eq
not_equal = _operator.ne
less = _operator.lt
less_equal = _operator.le
greater = _operator.gt
greater_equal = _operator.ge
add = _operator.add
sub = _operator.sub
mul = _operator.mul
true_divide = _operator.truediv
floor_divide = _operator.floordiv
mod = _operator.mod
pow = _operator.pow  # noqa: A001 (rf's name)

neg = _dt.neg
squared_difference = _dt.squared_difference
logical_and = _dt.logical_and
logical_or = _dt.logical_or
logical_not = _dt.logical_not
log_add_exp = _dt.log_add_exp
is_finite = _dt.is_finite
is_infinite = _dt.is_infinite
is_neg_infinite = _dt.is_neg_infinite
maximum = _dt.maximum
minimum = _dt.minimum
exp = _dt.exp
expm1 = _dt.expm1
log = _dt.log
safe_log = _dt.safe_log
log1p = _dt.log1p
sqrt = _dt.sqrt
rsqrt = _dt.rsqrt
square = _dt.square
abs = _dt.abs  # noqa: A001 (rf's name)
tanh = _dt.tanh
sigmoid = _dt.sigmoid
log_sigmoid = _dt.log_sigmoid
sin = _dt.sin
cos = _dt.cos
ceil = _dt.ceil
floor = _dt.floor
round = _dt.round  # noqa: A001 (rf's name)
relu = _dt.relu
elu = _dt.elu
selu = _dt.selu
silu = _dt.silu
swish = _dt.silu
gelu = _dt.gelu
softmax = _dt.softmax
log_softmax = _dt.log_softmax
gating = _dt.gating
lerp = _dt.lerp
cumsum = _dt.cumsum




def compare_bc(a: Tensor, kind: str, b: Tensor, *, dim_order=None) -> Tensor:
    """compare with allow_broadcast_all_sources=True."""
    if dim_order is None:
        return _compare(a, kind, b, allow_broadcast_all_sources=True)
    return _compare(a, kind, b, allow_broadcast_all_sources=True, dim_order=dim_order)


def combine_bc(a: Tensor, kind: str, b: Tensor, *, dim_order=None) -> Tensor:
    """combine with allow_broadcast_all_sources=True."""
    if dim_order is None:
        return _combine(a, kind, b, allow_broadcast_all_sources=True)
    return _combine(a, kind, b, allow_broadcast_all_sources=True, dim_order=dim_order)


_compare, _combine = _dt.compare, _dt.combine


def ceil_divide(a: Tensor, b: Tensor) -> Tensor:
    """ceil(a / b) for integers: -(-a // b)."""
    return -(-a // b)


def reciprocal(a: Tensor) -> Tensor:
    """1 / a."""
    return 1.0 / a


def opt_logical_or(a: Union[Tensor, bool], b: Union[Tensor, bool]) -> Union[Tensor, bool]:
    """a or b, for Python bools without making a Tensor (a constant True or False short-cuts)."""
    if isinstance(a, bool):
        return True if a else b
    if isinstance(b, bool):
        return True if b else a
    return _dt.logical_or(a, b)


def opt_logical_and(a: Union[Tensor, bool], b: Union[Tensor, bool]) -> Union[Tensor, bool]:
    """a and b, for Python bools without making a Tensor (a constant True or False short-cuts)."""
    if isinstance(a, bool):
        return b if a else False
    if isinstance(b, bool):
        return a if b else False
    return _dt.logical_and(a, b)


def clip_by_value(x: Tensor, clip_value_min=None, clip_value_max=None, *,
                  allow_broadcast_all_sources: bool = False) -> Tensor:
    """dimtorch.clip(x, min, max)."""
    if allow_broadcast_all_sources:
        return _clip(x, clip_value_min, clip_value_max, allow_broadcast_all_sources=True)
    return _clip(x, clip_value_min, clip_value_max)


_clip = _dt.clip


def identity(x: Tensor) -> Tensor:
    """x itself."""
    return x


def relu_square(x: Tensor) -> Tensor:
    """relu(x) ** 2."""
    return _square(_relu(x))


_square, _relu = _dt.square, _dt.relu
