"""The layers point down (docs/layers.md): the core reaches Python only through the registry of
definitions, torch only through the backend table; the Python helpers' ground floor imports only the
core; each C++ file's exports are declared in one header."""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

from dimtorch import _C

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = ROOT / "python" / "dimtorch"
HELPERS = {"axis_of", "check_tensor", "dim_str", "dims_arg", "dims_str", "keep_markers"}


def _sources():
    return {p.name: p.read_text() for p in sorted(SRC.glob("*.[ch]*"))}


def _required_names() -> set:
    text = (SRC / "definitions.cpp").read_text()
    block = text[text.index("kRequired[] = {"):]
    block = block[:block.index("nullptr}")]
    return set(re.findall(r'"([^"]+)"', block))


def test_the_core_imports_no_module_but_torch_in_the_backend():
    for name, text in _sources().items():
        if name != "backend.cpp":
            assert "PyImport_" not in text, f"src/{name} imports a module: reach torch through backend.h"


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
    from dimtorch import _compile
    table = _compile._core_definitions()
    for name in ("_valid_index", "linear"):  # one the core calls by name, one public function of _C
        broken = dict(table)
        del broken[name]
        with pytest.raises(KeyError, match=f"no Python definition registered for '{name}'"):
            _C._set_definitions(broken)
    _C._set_definitions(table)


def test_exports_are_declared_in_one_header():
    exports = (SRC / "exports.h").read_text()
    for name, text in _sources().items():
        for fn in re.findall(r"^bool (export_\w+)\(PyObject\* module\)", text, flags=re.M):
            if name.endswith(".h"):
                assert name == "exports.h", f"src/{name} declares {fn}: exports go in src/exports.h"
            else:
                assert f"bool {fn}(PyObject* module);" in exports, f"{fn} (src/{name}) is not in src/exports.h"
    module = (SRC / "module.cpp").read_text()
    assert "bool export_" not in module, "module.cpp declares exports: they belong in src/exports.h"


def _imports(path: pathlib.Path) -> list:
    """(module, names) of path's imports; module relative to the package ('._C', '.._args')."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            out.append(("." * node.level + (node.module or ""), {a.name for a in node.names}))
        elif isinstance(node, ast.Import):
            out.extend((a.name, set()) for a in node.names)
    return out


def test_the_helpers_module_imports_only_the_core():
    modules = {m for m, _ in _imports(PKG / "_args.py")}
    assert modules <= {"__future__", "._C"}, modules


def test_op_modules_take_their_helpers_from_the_ground_floor():
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "_shape_ops.py":
            continue  # re-exports them for code outside the package
        for module, names in _imports(path):
            if module.endswith("_shape_ops"):
                assert not names & HELPERS, f"{path.relative_to(PKG)} imports {names & HELPERS} from _shape_ops: use _args"


# Fast-path files not named after one family (none left; softmax is in ops_reduce.cpp, linear in
# ops_matmul.cpp, the norms in ops_normalization.cpp).
MIXED_FILES: set = set()


def test_fast_path_files_share_their_family_name():
    """src/ops_<family>.cpp goes with the definitions in _<family>.py (or ops/<family>.py,
    _<family>_ops.py) and the tests in tests/test_<family>.py (or test_ops_<family>.py,
    test_<family>_ops.py)."""
    tests = ROOT / "tests"
    for path in sorted(SRC.glob("ops_*.cpp")):
        if path.name in MIXED_FILES:
            continue
        family = path.stem[len("ops_"):]
        modules = [PKG / f"_{family}.py", PKG / "ops" / f"{family}.py", PKG / f"_{family}_ops.py"]
        assert any(p.exists() for p in modules), f"src/{path.name}: no Python module of family {family!r}"
        test_files = [tests / f"test_{family}.py", tests / f"test_ops_{family}.py", tests / f"test_{family}_ops.py"]
        assert any(p.exists() for p in test_files), f"src/{path.name}: no test file of family {family!r}"
