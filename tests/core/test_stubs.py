"""The type stub of dimtorch._C matches the build: the same public names, generated from the build
by scripts/gen_stubs.py (checked in up to date), and shipped with py.typed."""
import ast
import importlib.resources
import importlib.util
import pathlib

from dimtorch import _C

ROOT = pathlib.Path(__file__).resolve().parents[2]
STUB = ROOT / "python" / "dimtorch" / "_C.pyi"


def _gen_stubs():
    spec = importlib.util.spec_from_file_location("gen_stubs", ROOT / "scripts" / "gen_stubs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stub_names() -> set:
    names = set()
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def test_stub_lists_exactly_the_names_of_the_build():
    built = {n for n in dir(_C) if not n.startswith("__")}
    assert _stub_names() == built


def test_stub_classes_list_exactly_the_members_of_the_built_types():
    gen = _gen_stubs()
    for cls, text in ((_C.Dim, gen.DIM), (_C.Tensor, gen.TENSOR)):
        assert gen._stub_members(text) == gen._members(cls), cls.__name__


def test_checked_in_stub_is_what_the_generator_writes():
    assert STUB.read_text() == _gen_stubs().render(), "run: python scripts/gen_stubs.py"


def test_package_ships_py_typed_and_the_stub():
    files = importlib.resources.files("dimtorch")
    assert (files / "py.typed").is_file() and (files / "_C.pyi").is_file()
