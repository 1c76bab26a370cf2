"""The fuzz's calls (tests/fuzz_calls.py: a random batch, huge and derived dims, odd
values) on every op with a C++ fast path and every Tensor method with a Python definition, run both
ways: the fast path and the definition must both raise, or both return the same (dims, markers, raw
shape and dtype, values on valid frames; new dims of the same size). A fast path that returns a wrong
result where its definition raises or differs (Tensor.remaining_dims with a dim named twice returned
a tuple one item short) fails here. DIMTORCH_FUZZ_EXAMPLES caps the number of examples (100)."""
import math

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import dimtorch as dt
from dimtorch import _op_table
from dimtorch.ops import tensor as _tensor
import fuzz_calls as fuzz

_RANDOM = {"dropout"}  # draws differ between the two runs
PAIRS = {f"dimtorch.{name}": op.definition for name, op in _op_table.OPS.items()
         if op.fast_path is not None and name not in _RANDOM}
PAIRS.update({name: getattr(_tensor, name.rsplit(".", 1)[-1]) for name, *_ in fuzz._METHOD_CALLS
              if name.startswith("dimtorch.Tensor.") and callable(getattr(_tensor, name.rsplit(".", 1)[-1], None))})


def _same(a, b, pool_ids) -> bool:
    if isinstance(a, dt.Tensor) and isinstance(b, dt.Tensor):
        new_ok = lambda x, y: x is y or (id(x) not in pool_ids and id(y) not in pool_ids and x.size == y.size)  # noqa: E731
        if len(a.dims) != len(b.dims) or not all(new_ok(x, y) for x, y in zip(a.dims, b.dims)):
            return False
        if (a.sparse_dim is None) != (b.sparse_dim is None) or (a.feature_dim is None) != (b.feature_dim is None):
            return False
        if a.raw_tensor is None or b.raw_tensor is None:  # templates (copy_template)
            return a.raw_tensor is None and b.raw_tensor is None and a.dtype == b.dtype
        if a.raw.shape != b.raw.shape or a.raw.dtype != b.raw.dtype:
            return False
        if a.raw.device.type == "meta":
            return True
        # Padding may differ: zeroed where the tensor has the dims a dim's lengths are over (a tensor
        # over time alone, as ones(time) makes, has padding frames no mask of it can name).
        masked = [d for d in a.dims if d.is_dynamic() and all(x in a.dims for x in d.lengths.dims)]
        va, vb = a.copy_masked(0, dims=masked).raw, b.copy_masked(0, dims=masked).raw
        return torch.equal(va, vb) if va.dtype == torch.bool else torch.equal(va.nan_to_num(), vb.nan_to_num())
    if isinstance(a, dt.Dim) and isinstance(b, dt.Dim):
        return a is b or (id(a) not in pool_ids and id(b) not in pool_ids and a.size == b.size)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y, pool_ids) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):  # (Tensor.raw_aligned: a raw)
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
            return False
        return a.device.type == "meta" or torch.equal(a, b) if a.dtype == torch.bool else (
            a.device.type == "meta" or torch.equal(a.nan_to_num(), b.nan_to_num()))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


# Derandomized: the same examples every run (random ones are for hunting: a rare difference, such as one
# not yet explained for linear on int64 and bool operands, must not make CI flaky).
@settings(max_examples=min(fuzz.FUZZ_EXAMPLES, 100), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(env=fuzz._environments(), data=st.data())
def test_fast_paths_and_definitions_agree_on_fuzzed_calls(env, data):
    tensors, dims, odd = fuzz._pool(env)
    pool = tensors + dims + odd
    pool_ids = {id(o) for o in pool}
    n_good = len(tensors) + len(dims)
    calls = [c for c in fuzz._fuzz_calls() if c[0] in PAIRS]

    def arg():  # mostly tensors and dims, so that calls get past the type checks
        return pool[data.draw(st.integers(0, n_good - 1 if data.draw(st.integers(0, 4)) else len(pool) - 1))]

    for _ in range(fuzz.CALLS_PER_EXAMPLE):
        name, fn, pos, kw = calls[data.draw(st.integers(0, len(calls) - 1), label="call")]
        args = [arg() for _ in range(data.draw(st.integers(0 if kw else 1, max(1, len(pos))), label="n_positional"))]
        kwargs = {k: arg() for k in (kw or [])[len(args):] if data.draw(st.booleans())}
        results = []
        for f in (fn, PAIRS[name]):
            try:
                results.append((True, f(*args, **kwargs)))
            except Exception as e:  # noqa: BLE001 -- both sides raising is agreement
                results.append((False, e))
        (ok_fast, fast), (ok_def, definition) = results
        assert ok_fast == ok_def, f"{name}{tuple(args)} {kwargs}: fast path {fast!r}, definition {definition!r}"
        if ok_fast:
            assert _same(fast, definition, pool_ids), f"{name}{tuple(args)} {kwargs}: {fast!r} != {definition!r}"
