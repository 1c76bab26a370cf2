"""The version string has one source, python/dimtorch/_version.py, which the build reads."""
import importlib.metadata
import pathlib
import re
import tomllib

import dimtorch

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_installed_metadata_has_the_package_version():
    assert importlib.metadata.version("dimtorch") == dimtorch.__version__


def test_pyproject_reads_the_version_from_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    meta = project["tool"]["scikit-build"]["metadata"]["version"]
    assert (ROOT / meta["input"]).resolve() == ROOT / "python" / "dimtorch" / "_version.py"


def test_no_other_file_states_the_version():
    literal = re.compile(r"""(?m)^\s*(__version__|version|VERSION)\s*=\s*["']?\d+\.\d+""")
    hits = [p for p in [ROOT / "pyproject.toml", ROOT / "CMakeLists.txt", *(ROOT / "python").rglob("*.py"),
                        *(p for p in (ROOT / "src").rglob("*") if p.is_file())]
            if p.name != "_version.py" and literal.search(p.read_text(errors="replace"))]
    assert hits == []
