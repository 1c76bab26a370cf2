"""The fuzz's calls and arguments (tests/reliability/test_errors_name_the_call.py,
test_fuzz_fast_paths.py): every public function, Tensor and Dim method and operator with its parameter
names, and pools of arguments around a random batch (8 dtypes, cpu or meta, batch 0/1/3, lengths of
several dtypes, a raw time longer than the longest sequence), huge static dims, dims from dim math, and
odd Python values. DIMTORCH_FUZZ_EXAMPLES sets the number of examples (batches)."""
from __future__ import annotations

import inspect
import operator
import os
import re

import torch
from hypothesis import strategies as st

import dimtorch as dt


FUZZ_EXAMPLES = int(os.environ.get("DIMTORCH_FUZZ_EXAMPLES", "150"))


CALLS_PER_EXAMPLE = 40


_OK_ERRORS = (TypeError, ValueError, RuntimeError, IndexError, OverflowError, NotImplementedError,
              AttributeError)  # (assignments: read-only and frozen attributes; the message names the call)


# Operator protocol errors name the operator and the operand types themselves.
_OPERATOR_ERRORS = re.compile(r"unsupported operand|not supported between|bad operand type|string formatting")


_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8,
           torch.bool]


def _signature(fn):
    """(positional parameter names, keyword parameter names) of a public function: from its Python
    signature, or the first line of a C function's docstring ('name(a, b, *, c=1)')."""
    try:
        params = list(inspect.signature(fn).parameters.values())
        pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        kw = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        return pos, kw
    except (TypeError, ValueError):
        m = re.match(r"\w+\((.*?)\)", fn.__doc__ or "")
        if not m:  # the elementwise functions: fn(x)
            return ["x"], ["x"]
        pos, kw, star, only = [], [], False, []
        for part in m.group(1).split(","):
            name = part.strip().split("=")[0].strip()
            if name == "*" or name.startswith("*"):
                star = True
            elif name == "/":
                only, kw = list(kw), []  # the names so far are positional-only
            elif re.fullmatch(r"\w+", name):
                kw.append(name)
                if not star:
                    pos.append(name)
        return pos or ["x"], kw


def _public_functions():
    return [(name, getattr(dt, name)) for name in sorted(dir(dt))
            if not name.startswith("_") and callable(getattr(dt, name)) and name not in ("Dim", "Tensor", "torch")]


def _assign(attr: str):
    """Tensor.<attr> = value on a copy (so that the pool's Tensors stay as they are; a frozen one, which
    refuses, itself)."""
    def assign(self, value):
        if type(self) is not dt.Tensor:
            raise TypeError(f"dimtorch.Tensor.{attr} = ...: (the fuzz assigns on Tensors only)")
        target = self if self._frozen or self.raw_tensor is None else self.copy()
        setattr(target, attr, value)
    return assign


def _bind(self, value):
    """dim.dyn_size_ext = value on the pool's own dims, then back to what they had."""
    if type(self) is not dt.Dim:
        raise TypeError("dimtorch.Dim.dyn_size_ext = ...: (the fuzz binds Dims only)")
    old = self.dyn_size_ext
    self.dyn_size_ext = value
    self.dyn_size_ext = old


# (name, callable, positional names, keyword names); operators take one dimtorch operand at least.
_METHOD_CALLS = [
    ("dimtorch.Tensor()", dt.Tensor, ["raw", "dims"], ["sparse_dim", "feature_dim", "name"]),
    ("dimtorch.Dim()", dt.Dim, ["size", "name"], ["name"]),
    ("dimtorch.Tensor.raw_aligned", dt.Tensor.raw_aligned, ["self", "dims"], []),
    ("dimtorch.Tensor.copy_transpose", dt.Tensor.copy_transpose, ["self", "dims"], []),
    ("dimtorch.Tensor.copy_masked", dt.Tensor.copy_masked, ["self", "value"], ["dims"]),
    ("dimtorch.Tensor.remaining_dims", dt.Tensor.remaining_dims, ["self", "remove"], []),
    ("dimtorch.Tensor.get_axis", dt.Tensor.get_axis, ["self", "dim"], []),
    ("dimtorch.Tensor.copy", dt.Tensor.copy, ["self"], []),
    ("dimtorch.Dim.get_mask", dt.Dim.get_mask, ["self", "dims_order", "device"], ["dims_order", "device"]),
    ("dimtorch.Dim.get_size_tensor", dt.Dim.get_size_tensor, ["self", "device"], ["device"]),
    ("dimtorch.Dim.get_max_size", dt.Dim.get_max_size, ["self"], []),
    ("dimtorch.Dim.is_dynamic", dt.Dim.is_dynamic, ["self"], []),
    # RETURNN's Tensor API (dimtorch.ops.rf_tensor) and Dim API (dimtorch.ops.rf_dim)
    ("dimtorch.Tensor.copy_template", dt.Tensor.copy_template, ["self", "name", "dtype"], ["name", "dtype"]),
    ("dimtorch.Tensor.get_axis_from_description", dt.Tensor.get_axis_from_description, ["self", "axis", "allow_int"],
     []),
    ("dimtorch.Tensor.get_dim_tag", dt.Tensor.get_dim_tag, ["self", "axis"], []),
    ("dimtorch.Tensor.get_dyn_size_tags", dt.Tensor.get_dyn_size_tags, ["self"], []),
    ("dimtorch.Tensor.copy_compatible_to_dims", dt.Tensor.copy_compatible_to_dims, ["self", "dims"],
     ["add_dims", "unbroadcast"]),
    ("dimtorch.Tensor.copy_compatible_to_dims_raw", dt.Tensor.copy_compatible_to_dims_raw, ["self", "dims"],
     ["add_dims", "unbroadcast"]),
    ("dimtorch.Tensor.copy_compatible_to", dt.Tensor.copy_compatible_to, ["self", "data", "add_dims", "unbroadcast"],
     ["check_sparse", "check_dtype"]),
    ("dimtorch.Tensor.verify_out_shape", dt.Tensor.verify_out_shape, ["self", "out_shape"], []),
    ("dimtorch.Tensor.mark_as_loss", dt.Tensor.mark_as_loss, ["self", "name"], ["scale", "as_error"]),
    ("dimtorch.Tensor.mark_as_output", dt.Tensor.mark_as_output, ["self", "name"], ["shape"]),
    ("dimtorch.Tensor.mark_as_default_output", dt.Tensor.mark_as_default_output, ["self"], ["shape"]),
    ("dimtorch.Dim.get_dim_value", dt.Dim.get_dim_value, ["self"], []),
    ("dimtorch.Dim.get_dim_value_tensor", dt.Dim.get_dim_value_tensor, ["self"], []),
    ("dimtorch.Dim.copy", dt.Dim.copy, ["self", "same_as_self", "description"], ["kind", "match_priority"]),
    ("dimtorch.Dim.copy_from", dt.Dim.copy_from, ["self", "other"], []),
    ("dimtorch.Dim.div_left", dt.Dim.div_left, ["self", "other"], []),
    ("dimtorch.Dim.div_right", dt.Dim.div_right, ["self", "other"], []),
    ("dimtorch.Dim.ceildiv_right", dt.Dim.ceildiv_right, ["self", "other"], []),
    ("dimtorch.Dim.reset_eager", dt.Dim.reset_eager, ["self"], []),
] + [(f"dimtorch.Tensor.{attr} = ...", _assign(attr), ["self", "value"], [])
     for attr in ("raw_tensor", "sparse_dim", "feature_dim", "feature_dim_axis", "name")] + [
    ("dimtorch.Dim.dyn_size_ext = ...", _bind, ["self", "value"], []),
] + [(f"operator.{op.__name__}", op, ["a", "b"], None) for op in (
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod, operator.pow,
    operator.and_, operator.or_, operator.xor, operator.lt, operator.le, operator.eq, operator.ne, operator.gt,
    operator.ge)] + [(f"operator.{op.__name__}", op, ["a"], None) for op in (
    operator.neg, operator.pos, operator.abs, operator.invert, bool, len, hash, repr, float, int)]


def _fuzz_calls():
    return [(f"dimtorch.{name}", fn, *_signature(fn)) for name, fn in _public_functions()] + _METHOD_CALLS


@st.composite
def _environments(draw):
    """A random batch and a pool of call arguments built around it."""
    device = draw(st.sampled_from(["cpu", "meta"]))
    dtype = draw(st.sampled_from(_DTYPES))
    n_batch = draw(st.sampled_from([0, 1, 3]))
    max_len = draw(st.sampled_from([0, 1, 5]))
    lengths = draw(st.lists(st.sampled_from(sorted({0, max_len // 2, max_len})), min_size=n_batch, max_size=n_batch))
    lengths_dtype = draw(st.sampled_from([torch.int64, torch.int32, torch.uint8, torch.float32]))
    lengths_device = draw(st.sampled_from(["cpu", "cpu", "cpu", "meta"]))
    extra_time = draw(st.sampled_from([0, 0, 2]))
    feature_size = draw(st.sampled_from([0, 1, 4]))
    return device, dtype, lengths, lengths_dtype, lengths_device, extra_time, feature_size


def _pool(env):
    device, dtype, lengths, lengths_dtype, lengths_device, extra_time, feature_size = env
    n_batch, n_time = len(lengths), (max(lengths) if lengths else 0) + extra_time
    batch = dt.Dim(None, name="batch")
    lengths_raw = torch.tensor(lengths, dtype=lengths_dtype, device=lengths_device)
    try:  # a float or meta lengths tensor must be refused with a message naming the call
        time = dt.Dim(dt.Tensor(lengths_raw, (batch,)), name="time")
    except _OK_ERRORS as e:
        assert "dimtorch.Dim()" in str(e), e
        time = dt.Dim(dt.Tensor(torch.tensor(lengths, dtype=torch.int64), (batch,)), name="time")
    feat, vocab, out = dt.Dim(feature_size, name="feature"), dt.Dim(5, name="vocab"), dt.Dim(3, name="out")
    huge, huger = dt.Dim(2**40, name="huge"), dt.Dim(2**62, name="huger")

    def raw(*shape, dt_=dtype):
        return torch.zeros(shape, dtype=dt_, device=device) if dt_ == torch.bool else \
            torch.ones(shape, dtype=dt_, device=device)

    x = dt.Tensor(raw(n_batch, n_time, feature_size), (batch, time, feat), feature_dim=feat)
    xt = dt.Tensor(raw(feature_size, n_time, n_batch), (feat, time, batch))
    labels = dt.Tensor(torch.zeros(n_batch, n_time, dtype=torch.int64, device=device), (batch, time), sparse_dim=vocab)
    weight = dt.Tensor(raw(feature_size, 3), (feat, out))
    tensors = [x, xt, labels, weight, dt.Tensor(raw(), ()), dt.Tensor(raw(3, dt_=torch.float32), (out,)),
               dt.Tensor(torch.zeros(n_batch, n_time, dtype=torch.bool, device=device), (batch, time)), time.lengths]
    dims = [batch, time, feat, vocab, out, huge, huger, time + 1, time - 1, dt.ceildiv(time, 2), time + time,
            feat * 2, dt.Dim(None, name="free"), dt.Dim(0, name="empty")]
    odd = [None, 0, -1, 1, 2, 2**40, 2**70, True, 1.5, float("nan"), "time", "mean", "float32", "max", "same",
           (), [], {}, (batch, time), [time, batch], (time, time), (batch, time, feat), (time, feat), [x, x], (x, xt),
           (x, time), [(x, time), (x, time)], torch.float32, torch.device(device), "cpu", x.raw, lengths_raw,
           object()]
    return tensors, dims, odd


def _names_the_call(message: str, name: str) -> bool:
    """Whether an error message names the call: dimtorch's own, Python's argument errors of a
    dimtorch function ('reduce_sum() missing 1 required ...', 'Tensor.copy() takes no arguments'),
    or an operator's."""
    short = name.rsplit(".", 1)[-1].rstrip("()")
    return "dimtorch" in message or f"{short}()" in message or bool(_OPERATOR_ERRORS.search(message))
