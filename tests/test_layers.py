"""The house's rules (docs/layers.md), checked on the sources: the folders are layers and point down
(a module never imports one of a higher folder), nothing imports in a circle (package, benchmarks,
demo), the core reaches Python only through the registry of definitions and torch only through the
backend table, each C++ file's exports are declared in one header, every op family is one module
in ops/ (its fast path, if any, src/ops/<family>.cpp, its tests tests/ops/test_<family>.py), and the
tests mirror the sources."""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

from dimtorch import _C, _op_table
from import_graph import cycles, graph, imports_of, module_name

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = ROOT / "python" / "dimtorch"
TESTS = ROOT / "tests"
HELPERS = {"axis_of", "check_tensor", "dim_str", "dims_arg", "dims_str", "keep_markers"}

# The package's layers, lowest first: a module may import modules of its own layer or lower ones.
# Root modules are placed one by one; every other module by its top folder.
LAYERS = [
    {"dimtorch._C", "dimtorch._version"},  # the C++ core (and the version string)
    {"dimtorch._core"},                     # the ground floor: argument checks, dtypes, tracing predicates
    {"dimtorch.ops"},                       # one module per op family: every op's definition
    {"dimtorch.audio"},                     # speech front end, from the ops
    {"dimtorch._op_table", "dimtorch._pickle"},  # the op table; Dim/Tensor pickling
    {"dimtorch._capture"},                  # registers the table with the core and Dynamo
    {"dimtorch.nn"},                        # modules (torch.nn.Modules), from the ops
    {"dimtorch"},                           # the public surface (dimtorch/__init__.py): binds all of the above
    {"dimtorch.rf"},                        # RETURNN frontend's module paths over the public surface
]


def _layer(module: str) -> int:
    parts = module.split(".")
    for prefix in (".".join(parts[:2]), module):
        for i, layer in enumerate(LAYERS):
            if prefix in layer:
                return i
    raise AssertionError(f"{module} is in no layer of tests/test_layers.py: place it in LAYERS and docs/layers.md")


def _sources() -> dict:
    return {str(p.relative_to(SRC)): p.read_text() for p in sorted(SRC.rglob("*.[ch]*"))}


def _required_names() -> set:
    text = (SRC / "core" / "definitions.cpp").read_text()
    block = text[text.index("kRequired[] = {"):]
    block = block[:block.index("nullptr}")]
    return set(re.findall(r'"([^"]+)"', block))


def test_every_module_imports_only_its_own_layer_or_lower_ones():
    for module, imported in graph(PKG, "dimtorch").items():
        for other in imported:
            assert _layer(other) <= _layer(module), (
                f"{module} (layer {_layer(module)}) imports {other} (layer {_layer(other)}): a lower folder never "
                f"imports a higher one (docs/layers.md)")


@pytest.mark.parametrize("folder,prefix", [(PKG, "dimtorch"), (ROOT / "bench", ""), (ROOT / "demo", "demo")])
def test_no_import_circles(folder, prefix):
    circles = cycles(graph(folder, prefix))
    assert not circles, f"modules that import each other (directly or round a circle): {circles}"


def test_the_ground_floor_imports_only_the_core():
    known = set(graph(PKG, "dimtorch")) | {"dimtorch._C"}
    for path in sorted((PKG / "_core").glob("*.py")):
        name = module_name(path, PKG, "dimtorch")
        others = {m for m in imports_of(path, name, known) if not m.startswith("dimtorch._core")}
        assert others <= {"dimtorch._C"}, f"{name} imports {others}: the ground floor imports only dimtorch._C"


def test_op_modules_take_their_helpers_from_the_ground_floor():
    for path in sorted(PKG.rglob("*.py")):
        if path == PKG / "ops" / "shape.py":
            continue  # re-exports them for code outside the package
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("shape"):
                names = {a.name for a in node.names}
                assert not names & HELPERS, f"{path.relative_to(PKG)} imports {names & HELPERS} from ops.shape: use _core.args"


def test_every_op_is_defined_in_ops():
    for name, module in _op_table._DEFINITIONS.items():
        assert module.startswith("ops."), f"dimtorch.{name} is defined in dimtorch.{module}: op definitions live in ops/"


def test_the_core_imports_no_module_but_torch_in_the_backend():
    for name, text in _sources().items():
        if name != "core/backend.cpp":
            assert "PyImport_" not in text, f"src/{name} imports a module: reach torch through core/backend.h"


# core/ files that include an ops/ header, and why (docs/layers.md).
CORE_USES_OPS = {
    "core/dim_math.cpp": "ops/elementwise.h",  # A + B adds lengths over different batch dims: the elementwise add
}


def test_the_core_includes_no_op_header_but_the_ones_named():
    for name, text in _sources().items():
        if not name.startswith("core/"):
            continue
        used = set(re.findall(r'#include "(ops/[\w.]+)"', text))
        allowed = {CORE_USES_OPS[name]} if name in CORE_USES_OPS else set()
        assert used <= allowed, f"src/{name} includes {used - allowed}: the core does not build on the ops"


def test_every_name_the_core_calls_is_checked_at_import():
    """Names passed to the registry (call_definition, call_method_definition, definition, the
    fallback macro, operator slots) are all in kRequired, which _set_definitions checks at import."""
    calls = re.compile(r'(?:call_definition|call_method_definition|definition|unary_definition|slot_definition)'
                       r'\(\s*"([^"]+)"(?:\s*,\s*"([^"]+)")?')
    fallback = re.compile(r'DIMTORCH_PYTHON_FALLBACK\(\s*\w+\s*,\s*"([^"]+)"\)')
    slots = re.compile(r'"(Tensor\.__\w+__)"')
    used = set()
    for text in _sources().values():
        for m in calls.finditer(text):
            used.update(n for n in m.groups() if n)
        used.update(fallback.findall(text))
        used.update(slots.findall(text))
    used = {n for n in used if "%" not in n}
    # slot_definition("Tensor.__" pyname "__", ...) builds names from a macro argument: the slots' list
    used -= {"Tensor.__", "Tensor.__r"}
    missing = used - _required_names()
    assert not missing, f"names the core calls without being checked at import (add them to kRequired): {missing}"


def test_registration_refuses_a_table_without_a_required_definition():
    from dimtorch._capture import compile as _compile
    table = _compile._core_definitions()
    for name in ("_valid_index", "linear"):  # one the core calls by name, one public function of _C
        broken = dict(table)
        del broken[name]
        with pytest.raises(KeyError, match=f"no Python definition registered for '{name}'"):
            _C._set_definitions(broken)
    _C._set_definitions(table)


def test_exports_are_declared_in_one_header():
    exports = (SRC / "core" / "exports.h").read_text()
    for name, text in _sources().items():
        for fn in re.findall(r"^bool (export_\w+)\(PyObject\* module\)", text, flags=re.M):
            if name.endswith(".h"):
                assert name == "core/exports.h", f"src/{name} declares {fn}: exports go in src/core/exports.h"
            else:
                assert f"bool {fn}(PyObject* module);" in exports, f"{fn} (src/{name}) is not in src/core/exports.h"
    module = (SRC / "core" / "module.cpp").read_text()
    assert "bool export_" not in module, "module.cpp declares exports: they belong in src/core/exports.h"


def test_fast_path_files_share_their_family_name():
    """src/ops/<family>.cpp goes with the definitions in python/dimtorch/ops/<family>.py and the tests in
    tests/ops/test_<family>.py."""
    for path in sorted((SRC / "ops").glob("*.cpp")):
        family = path.stem
        assert (PKG / "ops" / f"{family}.py").exists(), f"src/ops/{path.name}: no python/dimtorch/ops/{family}.py"
        assert (TESTS / "ops" / f"test_{family}.py").exists(), f"src/ops/{path.name}: no tests/ops/test_{family}.py"


# Test folders and the sources they mirror; tests of a module of nn/ are tests/nn/test_<module>.py.
TEST_FOLDERS = {
    "core": "the C++ core types (src/core) and their Python side",
    "ops": "op families (python/dimtorch/ops, src/ops)",
    "audio": "python/dimtorch/audio",
    "capture": "graph capture (python/dimtorch/_capture, in-graph forms of the ops)",
    "nn": "python/dimtorch/nn",
    "rf": "python/dimtorch/rf and RETURNN frontend parity",
    "reliability": "bad input, leaks, threads, garbage, device syncs",
    "demo": "demo/",
    "bench": "bench/",
}


def test_tests_mirror_the_sources():
    for path in sorted(TESTS.rglob("test_*.py")):
        rel = path.relative_to(TESTS)
        if len(rel.parts) == 1:
            continue  # the house: layers, README commands, typing, version, smoke
        assert rel.parts[0] in TEST_FOLDERS, f"tests/{rel}: tests live in {sorted(TEST_FOLDERS)} (docs/layers.md)"


def test_every_test_file_names_what_it_tests():
    for path in sorted(TESTS.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc, f"tests/{path.relative_to(TESTS)} has no header saying what it tests"
