"""dimtorch.rf has RETURNN frontend's module paths and names: every module of this package imports, every
name that docs/rf_coverage.md marks same or alt exists under dimtorch.rf with a signature a call written
against RETURNN frontend's binds to (rf_signatures.py; run where returnn is importable), and the names
bound to dimtorch's ops are those ops themselves (the same objects: their speed and graph capture)."""
import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest

import dimtorch as dt
import dimtorch.rf as rf
from rf_signatures import NOT_TAKEN, problems, signature_of

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["array_", "math_", "reduce", "matmul", "loss", "label_smoothing", "signal", "audio", "audio.mel",
           "audio.specaugment", "nested", "rand", "dropout", "const", "dims", "dtype", "device", "gradient",
           "assert_", "backend", "amp", "types", "control_flow_ctx"]
# modules of rf's Tensor/Dim API, modules, parameters, run context and loops: written beside this package
OTHER_MODULES = {"module", "state", "parameter", "run_ctx", "loop", "cond", "tensor_array", "container", "linear",
                 "conv", "normalization", "attention", "rec", "parametrize", "parametrizations", "hooks", "init",
                 "encoder", "decoder", "tensor"}


def _coverage():
    spec = importlib.util.spec_from_file_location("rf_coverage", ROOT / "scripts" / "rf_coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COV = _coverage()
ENTRIES = [(module, name, status) for module, entries in COV.TABLE.items() for name, status, _, _ in entries
           if status in (COV.S, COV.ALT)]
for _module in sorted({m for m, _, _ in ENTRIES}):  # their module-level default Dims exist before the leak check
    importlib.import_module(f"dimtorch.rf.{_module}")


@pytest.mark.parametrize("module", MODULES)
def test_module_paths_import(module):
    mod = importlib.import_module(f"dimtorch.rf.{module}")
    for name in getattr(mod, "__all__", ()):
        assert hasattr(mod, name), f"dimtorch.rf.{module}.{name} is in __all__ but missing"


def _ours(module: str, name: str):
    """dimtorch.rf's object for rf.<module>.<name>: from dimtorch.rf.<module> where that module exists,
    else (a function RETURNN keeps in another helper's module) from dimtorch.rf itself; None if absent."""
    try:
        mod = importlib.import_module(f"dimtorch.rf.{module}")
    except ModuleNotFoundError:
        mod = None
    if mod is not None and hasattr(mod, name):
        return getattr(mod, name)
    return getattr(rf, name, None) if "." not in module else None


def _skip_if_elsewhere(module: str, name: str):
    top = module.split(".")[0]
    if top in OTHER_MODULES and importlib.util.find_spec(f"dimtorch.rf.{top}") is None:
        pytest.skip(f"dimtorch.rf.{top} (rf's {top} module) is not in this checkout")
    if (module, name) in (("types", "Tensor"), ("types", "Dim")) and \
            importlib.util.find_spec("dimtorch.rf.tensor") is None:
        pytest.skip("dimtorch.rf.tensor (rf's Tensor and Dim API) is not in this checkout")


# classes whose signatures are not compared here: dimtorch's C types (their constructor forms, rf's and
# dimtorch's, are tested in tests/rf/test_tensor_api.py and test_dim_api.py) and a handle that code
# receives from a hook's registration and never constructs
_NOT_COMPARED = {("types", "Tensor"), ("types", "Dim"), ("hooks", "RemovableHandle")}


@pytest.mark.parametrize("module,name,status", ENTRIES, ids=[f"{m}.{n}" for m, n, _ in ENTRIES])
def test_same_and_alt_names_exist_with_rf_signature(module, name, status):
    ours = _ours(module, name)
    if ours is None:
        _skip_if_elsewhere(module, name)
    assert ours is not None, f"rf.{module}.{name} ({status} in docs/rf_coverage.md) is missing from dimtorch.rf"
    pytest.importorskip("returnn")
    rf_module = importlib.import_module(f"returnn.frontend.{module}")
    theirs = getattr(rf_module, name)
    if inspect.isclass(theirs):
        _skip_if_elsewhere(module, name)
    if (module, name) in _NOT_COMPARED:
        pytest.skip(f"rf.{module}.{name}: its constructor is not what code calls (see _NOT_COMPARED)")
    rf_sig, our_sig = signature_of(theirs), signature_of(ours)
    if rf_sig is None:
        pytest.skip(f"rf.{module}.{name} has no signature")
    assert our_sig is not None, f"dimtorch.rf.{name} has no signature"
    found = problems(rf_sig, our_sig, NOT_TAKEN.get((module, name), {}))
    assert not found, f"rf.{module}.{name}{rf_sig} vs dimtorch.rf's {our_sig}: " + "; ".join(found)


# rf names bound to dimtorch's ops themselves (no wrapper frame): a sample of the hot ones
SAME_OBJECT = {
    "pad": dt.pad, "concat": dt.concat, "gather": dt.gather, "matmul": dt.matmul, "dot": dt.dot, "top_k": dt.top_k,
    "reduce_sum": dt.reduce_sum, "softmax": dt.softmax, "log_softmax": dt.log_softmax, "cross_entropy": dt.cross_entropy,
    "ctc_loss": dt.ctc_loss, "cumsum": dt.cumsum, "pack_padded": dt.pack_padded, "split": dt.split,
    "random_uniform": dt.random_uniform, "convert_to_tensor": dt.convert_to_tensor, "slice": dt.slice,
    "combine": dt.combine, "compare": dt.compare, "maximum": dt.maximum, "stack": dt.stack, "zeros": dt.zeros,
    "cast": dt.cast, "where": dt.where, "relu": dt.relu, "pad_packed": dt.unpack_padded, "swish": dt.silu,
}


@pytest.mark.parametrize("name", sorted(SAME_OBJECT))
def test_hot_names_are_dimtorchs_ops_themselves(name):
    assert getattr(rf, name) is SAME_OBJECT[name]
