"""The op table (dimtorch._op_table): every public function of dimtorch._C has a Python definition,
so that no fast path goes untested against one; the definitions trace into a graph (make_fx)."""
from __future__ import annotations

import inspect

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import dimtorch as dt
from dimtorch import _C, _op_table

from definition_checks import padded

# Public functions of dimtorch._C whose definitions are not written yet. Empty it as they come.
EXPECTED_MISSING = set()


def test_every_fast_path_has_a_definition():
    public = {name for name in dir(_C) if not name.startswith("_") and name not in ("Dim", "Tensor")
              and callable(getattr(_C, name))}
    missing = public - set(_op_table.OPS)
    assert missing == EXPECTED_MISSING, (
        f"functions of dimtorch._C without a row in dimtorch._op_table: {sorted(missing - EXPECTED_MISSING)}; "
        f"rows that came (drop them from EXPECTED_MISSING): {sorted(EXPECTED_MISSING - missing)}")
    for name, op in _op_table.OPS.items():
        assert op.fast_path is getattr(_C, name, None), name
        assert inspect.isfunction(inspect.unwrap(op.definition)), f"{name}: the definition is not a Python function"
        if op.fast_path is not None:
            assert getattr(dt, name) is op.fast_path, f"dimtorch.{name} is not the fast path"


def _calls():
    """One sample call per definition in ops/ (name -> fn(x, dims) of a Tensor x over (batch,
    time, feature, heads)); its results depend on x's raw."""
    out = dt.Dim(5, name="out")

    def w(*dims):
        return dt.Tensor(torch.ones([d.size for d in dims]), dims)
    binary = {name: (lambda n: lambda x, d: getattr(dt.ops.elementwise, n)(x, w(d[2]) * 0.5))(name)
              for name in ("maximum", "minimum", "logical_and", "logical_or")}
    unary = {name: (lambda n: lambda x, d: getattr(dt.ops.elementwise, n)(x))(name)
             for name in ("exp", "log", "log1p", "sqrt", "rsqrt", "square", "tanh", "sigmoid", "relu", "gelu",
                          "silu", "softplus", "sin", "cos", "floor", "ceil", "round", "is_finite", "logical_not",
                          "abs", "neg", "is_infinite", "is_neg_infinite", "expm1", "elu", "selu")}
    reduce = {name: (lambda n: lambda x, d: getattr(dt.ops.reduce, n)(x, d[1]))(name)
              for name in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_logsumexp", "reduce_any",
                           "reduce_all", "reduce_argmax", "reduce_argmin", "moments", "softmax", "log_softmax")}
    E, M, N, C = dt.ops.elementwise, dt.ops.matmul, dt.ops.normalization, dt.ops.creation
    return {
        **binary, **unary, **reduce,
        "combine": lambda x, d: E.combine(x, w(d[3], d[2]), "mul"),
        "compare": lambda x, d: E.compare(x, w(d[2]), "<"),
        "where": lambda x, d: E.where(E.compare(x, 0.0, ">"), x, w(d[2])),
        "clip": lambda x, d: E.clip(x, w(d[2]) * -1.0, 1.0),
        "cast": lambda x, d: E.cast(x, "float64"),
        "lerp": lambda x, d: E.lerp(x, E.combine(x, w(d[2]), "mul"), 0.25),
        "lerp_tensor_weight": lambda x, d: E.lerp(x, w(d[2]), E.sigmoid(x)),
        "mean_over_batch_and_time": lambda x, d: dt.ops.reduce.reduce_mean(x, (d[0], d[1])),
        "reduce_logmeanexp": lambda x, d: dt.ops.reduce.reduce_logmeanexp(x, d[1]),
        "logmeanexp_over_batch_and_time": lambda x, d: dt.ops.reduce.reduce_logmeanexp(x, (d[0], d[1])),
        "moments_over_batch": lambda x, d: dt.ops.reduce.moments(x, d[0]),
        "matmul": lambda x, d: M.matmul(x, w(d[2], out), d[2]),
        "dot": lambda x, d: M.dot(x, dt.ops.reduce.reduce_sum(x, d[3]), (d[0], d[1]), use_mask=True),
        "linear": lambda x, d: M.linear(x, w(out, d[2]), w(out)),
        "layer_norm": lambda x, d: N.layer_norm(x, (d[3], d[2]), weight=w(d[2], d[3])),
        "rms_norm": lambda x, d: N.rms_norm(x, d[2]),
        "batch_norm": lambda x, d: N.batch_norm(x, running_mean=w(d[2]) * 0.0, running_var=w(d[2])),
        "zeros": lambda x, d: E.combine(x, C.zeros((d[2], d[3])), "add"),
        "ones": lambda x, d: E.combine(x, C.ones((d[2],)), "add"),
        "full": lambda x, d: E.combine(x, C.full((d[3],), 2.0), "add"),
    }


@pytest.mark.parametrize("name", sorted(_calls()))
def test_definitions_trace(name):
    """make_fx with fake tensors: a definition that read x's data on the host (.item(), bool(), a
    data-dependent branch) would fail here. (Lengths are host constants in this graph; that they
    become graph inputs is the Dim type's part.)"""
    x, dims = padded((4, 2, 0), extra=1, perm=(2, 0, 3, 1))
    call = _calls()[name]

    def f(raw):
        out = call(dt.Tensor(raw, x.dims, feature_dim=x.feature_dim), dims)
        return tuple(o.raw for o in (out if isinstance(out, tuple) else (out,)))

    graph = make_fx(f, tracing_mode="fake", _allow_non_fake_inputs=True)(x.raw)
    expected = f(x.raw)
    got = graph(x.raw)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, equal_nan=True)


# Where each fast path is tested against its definition, by the module of the definition. A new
# fast path in a module not listed here fails below until its comparison test is named.
FAST_PATH_TESTS = {
    "ops.elementwise": "ops/test_elementwise_definitions.py",
    "ops.reduce": "ops/test_reduce_definitions.py",
    "ops.matmul": "ops/test_matmul_definitions.py",
    "ops.normalization": "ops/test_normalization_definitions.py",
    "ops.creation": "ops/test_creation_definitions.py",
    "ops.dim": "capture/test_traceable_types.py",
    "ops.concat": "ops/test_concat.py",
    "ops.conv": "ops/test_conv_fast_path.py",
    "ops.pool": "ops/test_pool.py",
    "ops.gating": "ops/test_gating.py",
    "ops.reduce_out": "ops/test_reduce_out.py",
    "ops.signal": "ops/test_signal.py",
    "ops.label_smoothing": "ops/test_label_smoothing.py",
    "ops.nested": "ops/test_nested.py",
    "ops.window": "ops/test_window.py",
    "ops.attention": "ops/test_attention.py",
    "ops.positional": "ops/test_positional.py",
    "ops.loop": "ops/test_loop.py",
    **{module: "ops/test_array_fast_paths.py" for module in (
        "ops.slicing", "ops.stack", "ops.sort", "ops.packing", "ops.scatter", "ops.gather", "ops.pad", "ops.reshape",
        "ops.shape", "ops.masked", "ops.dropout")},
    "ops.ctc_align": "ops/test_ctc_align.py",
    "ops.repeat": "ops/test_repeat.py",
    "ops.decoding": "ops/test_decoding.py",
    "ops.gradient": "ops/test_gradient.py",
    "ops.safe_log": "ops/test_safe_log.py",
}


def test_every_fast_path_is_tested_against_its_definition():
    import pathlib
    import re
    here = pathlib.Path(__file__).resolve().parents[1]  # tests/
    for name, op in _op_table.OPS.items():
        if op.fast_path is None:
            continue
        module = _op_table._DEFINITIONS[name]
        assert module in FAST_PATH_TESTS, (
            f"dimtorch.{name} has a fast path but no test against its definition in dimtorch.{module}: "
            f"write one and name its file in FAST_PATH_TESTS")
        text = (here / FAST_PATH_TESTS[module]).read_text()
        assert re.search(rf"\b{name}\b", text), f"{FAST_PATH_TESTS[module]} does not call {name}"


def test_the_public_functions_are_the_op_table():
    # dimtorch/__init__.py imports the names by hand (so that type checkers and IDEs see them); the op
    # table is what they must be: each row bound to its fast path (or definition), and no public
    # function outside the table.
    for name, op in _op_table.OPS.items():
        assert getattr(dt, name, None) is (op.fast_path or op.definition), f"dimtorch.{name} is not its table row"
    public = {name for name in dir(dt) if not name.startswith("_") and callable(getattr(dt, name))
              and not inspect.isclass(getattr(dt, name)) and not inspect.ismodule(getattr(dt, name))}
    assert public - set(_op_table.OPS) == set(), f"public functions without a row: {sorted(public - set(_op_table.OPS))}"
