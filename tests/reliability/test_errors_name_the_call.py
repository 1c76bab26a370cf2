"""Bad input anywhere gives a Python exception whose message names the dimtorch call, also where the
error comes from torch (its messages name no dimtorch call): pinned cases, then a fuzz of the public
ops with odd arguments."""
from __future__ import annotations

import gc
import inspect
import operator
import os
import re
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import dimtorch as dt

from fuzz_calls import (  # noqa: F401  (CALLS_PER_EXAMPLE, _METHOD_CALLS: read by the tests)
    CALLS_PER_EXAMPLE, FUZZ_EXAMPLES, _METHOD_CALLS, _OK_ERRORS, _environments, _fuzz_calls, _names_the_call,
    _pool, _public_functions,
)
from helpers import make_padded_batch


@pytest.fixture
def batch():
    return make_padded_batch((3, 2, 0), feature=4)


def test_torch_errors_get_the_call_in_front(batch):
    x = batch.x
    cases = [
        (lambda: x & x, NotImplementedError, r"^dimtorch.Tensor.__and__\(\): .*bitwise_and"),
        (lambda: dt.where(x, x, 0.0), RuntimeError, r"^dimtorch.where\(\): .*boolean"),
        (lambda: dt.full((batch.feature,), "a"), TypeError, r"^dimtorch.full\(\): .*fill_value"),
        (lambda: dt.cast(x, "int64") + 2**70, OverflowError, r"^dimtorch.Tensor.__add__\(\)"),
        (lambda: dt.reduce_mean(dt.cast(x, "int64"), axis=batch.feature), RuntimeError, r"^dimtorch.reduce_mean\(\)"),
        (lambda: batch.time + 2**70, OverflowError, r"^dimtorch dim math: the int \d+ is out of range"),
        (lambda: dt.linear(dt.cast(x, "int64"), dt.Tensor(torch.randn(3, 4), (dt.Dim(3, name="o"), batch.feature))),
         RuntimeError, r"^dimtorch.linear\(\): .*dtype"),
        (lambda: dt.softmax(dt.cast(x, "int64"), axis=batch.feature),
         NotImplementedError, r"^dimtorch.softmax\(\): .*Long"),
        (lambda: dt.layer_norm(dt.cast(x, "int64"), axis=batch.feature, eps=1e-5),
         NotImplementedError, r"^dimtorch.layer_norm\(\): .*Long"),
        (lambda: dt.pad(x, axes=batch.feature, padding=(1, 1), value="a"), TypeError, r"^dimtorch.pad\(\): .*value"),
        (lambda: dt.convert_to_tensor({}),
         RuntimeError, r"^dimtorch.convert_to_tensor\(\): cannot make a tensor of dict"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind, match=message):
            call()


def test_flags_that_are_tensors_are_refused(batch):
    x, flag = batch.x, torch.tensor(True)
    cases = [
        (lambda: dt.reduce_sum(x, axis=batch.time, use_mask=flag), r"dimtorch.reduce_sum\(\): use_mask must be a bool"),
        (lambda: dt.moments(x, axis=batch.time, use_mask=flag), r"dimtorch.moments\(\): use_mask must be a bool"),
        (lambda: dt.softmax(x, axis=batch.time, use_mask=flag), r"dimtorch.softmax\(\): use_mask must be a bool"),
        (lambda: dt.combine(x, x, "add", allow_broadcast_all_sources=x),
         r"dimtorch.combine\(\): allow_broadcast_all_sources must be a bool"),
        (lambda: dt.dropout(x, 0.5, training=flag), r"dimtorch.dropout\(\): training must be a bool"),
    ]
    for call, message in cases:
        with pytest.raises(TypeError, match=message):
            call()


def test_fuzz_findings_of_the_python_ops(batch):
    # Found by test_fuzz_public_api: torch's errors and wrong argument kinds inside the Python-only ops.
    x, time, feature = batch.x, batch.time, batch.feature
    huge = dt.Dim(2**40, name="huge")
    cases = [
        (lambda: dt.where_nested([x], [x], condition=x), RuntimeError, r"^dimtorch.where(_nested)?\(\): .*boolean"),
        (lambda: dt.masked_scatter_nested(x, x, mask=time, dims=[batch.batch], in_dim=time,
                                          masked_select_dim_map={}),
         TypeError, r"^dimtorch.masked_scatter_nested\(\): mask"),
        (lambda: dt.masked_scatter_nested(x, x, mask=dt.Tensor(batch.mask, (batch.batch, time)), dims=[batch.batch], in_dim=time,
                                          masked_select_dim_map=x),
         TypeError, r"^dimtorch.masked_scatter_nested\(\): masked_select_dim_map must be a dict"),
        (lambda: dt.gather_nested(x, indices=dt.Tensor(torch.zeros(3, dtype=torch.int64), (batch.batch,),
                                                       sparse_dim=batch.batch), dim_map=x),
         TypeError, r"^dimtorch.gather_nested\(\): dim_map must be a dict"),
        (lambda: dt.gating(x, act_func=None), TypeError, r"^dimtorch.gating\(\): act_func must be callable"),
        (lambda: dt.gating(dt.cast(x, "int64")), NotImplementedError, r"^dimtorch.gating\(\): .*Long"),
        (lambda: dt.sinusoidal_positional_encoding(spatial_dim=huge, feat_dim=huge), RuntimeError,
         r"^dimtorch.sinusoidal_positional_encoding\(\)"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind, match=message):
            call()


def test_devices_and_dims_of_sequence_mask(batch):
    with pytest.raises(ValueError, match=r"dimtorch.sequence_mask\(\): device must be a torch.device or a device name"):
        dt.sequence_mask((batch.batch, batch.time), device="nowhere")
    with pytest.raises(TypeError,
                       match=r"dimtorch.sequence_mask\(\): dims must be a Dim or a sequence of Dims, got int"):
        dt.sequence_mask(3)
    with pytest.raises(ValueError, match=r"dimtorch.Dim.get_mask\(\): device must be"):
        batch.time.get_mask(device=1.5)


# --- the fuzz --------------------------------------------------------------------------------------
# Every public function, Tensor/Dim method and operator, called with random (mostly wrong)
# arguments drawn from a pool: the tensors and dims of a random batch (dtype, device cpu/meta, batch
# size 0/1/3, lengths 0 to max, lengths dtype int64/int32/uint8 or wrong, raw time longer than the
# longest sequence), huge static dims, dims from dim math, and odd Python values. Asserted: no crash
# (scripts/test_sanitized.sh runs this under ASan + UBSan in CI), every failure is an exception of an
# ordinary kind whose message names a dimtorch call, the arguments' reference counts are unchanged
# once the result is gone, and (conftest) no Tensor or Dim leaks. DIMTORCH_FUZZ_EXAMPLES sets the
# number of examples (batches), each making CALLS_PER_EXAMPLE calls.


def test_fuzz_covers_the_public_api():
    names = {name for name, *_ in _fuzz_calls()}
    for name, _ in _public_functions():
        assert f"dimtorch.{name}" in names
    assert len(names) >= 100, len(names)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(env=_environments(), data=st.data())
def test_fuzz_public_api(env, data):
    tensors, dims, odd = _pool(env)
    # Tensors and dims first in the pool: the draws favour them, so that calls get past the type
    # checks into the ops.
    pool = tensors + dims + odd
    # Not the lengths: a dim's cache of device lengths holds their raw itself (on their device).
    watched = [o for t in tensors if t is not tensors[-1] for o in (t, t.raw)]
    calls = _fuzz_calls()
    for _ in range(CALLS_PER_EXAMPLE):
        refcounts = [sys.getrefcount(o) for o in watched]
        name, fn, pos, kw = calls[data.draw(st.integers(0, len(calls) - 1), label="call")]
        if kw is None:  # an operator: a Tensor or Dim, and anything
            args = [pool[data.draw(st.integers(0, len(tensors) + len(dims) - 1))]] + \
                [pool[data.draw(st.integers(0, len(pool) - 1))] for _ in pos[1:]]
            if data.draw(st.booleans()):
                args.reverse()
            kwargs = {}
        else:
            n_pos = data.draw(st.integers(0 if kw else 1, max(1, len(pos))), label="n_positional")
            args = [pool[data.draw(st.integers(0, len(pool) - 1))] for _ in range(n_pos)]
            kwargs = {k: pool[data.draw(st.integers(0, len(pool) - 1))] for k in kw[n_pos:]
                      if data.draw(st.booleans())}
        try:
            result = fn(*args, **kwargs)
        except _OK_ERRORS as e:
            assert _names_the_call(str(e), name), (name, args, kwargs, e)
        except Exception as e:  # noqa: BLE001 -- any other kind is a bug
            raise AssertionError(f"{name}{tuple(args)} {kwargs}: {type(e).__name__}: {e}") from e
        else:
            del result
        del args, kwargs
        after = [sys.getrefcount(o) for o in watched]
        if after != refcounts:  # garbage in reference cycles (torch's error paths make some) first
            gc.collect()
            after = [sys.getrefcount(o) for o in watched]
            assert all(a <= b for a, b in zip(after, refcounts)), f"{name} kept a reference to an argument"


def test_module_functions_stay_plain_builtins():
    # Every C++ op is registered through one wrapper that names torch's errors: the functions are
    # still module-level builtins (their repr, pickling by name).
    import pickle
    for fn in (dt.reduce_sum, dt.relu, dt.slice, dt.ceildiv, dt.where):
        assert repr(fn) == f"<built-in function {fn.__name__}>"
        assert pickle.loads(pickle.dumps(fn)) is fn
