"""A type checker (mypy, pinned in pyproject's test extra) accepts the README example and the demo's
dimtorch model against dimtorch's types (python/dimtorch/_C.pyi and the package's annotations)."""
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("mypy")
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _mypy(tmp_path, *files) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           "--config-file", str(ROOT / "pyproject.toml"), *map(str, files)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def _readme_example(tmp_path) -> pathlib.Path:
    example = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    path = tmp_path / "readme_example.py"
    path.write_text(example)
    return path


@pytest.mark.slow  # mypy over the package
def test_mypy_accepts_the_readme_example_and_the_demo_model(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(_readme_example(tmp_path).read_text() + "q = dt.reduce_mean(y, axis=3)\n")
    r = _mypy(tmp_path, _readme_example(tmp_path), ROOT / "demo" / "dimtorch_model.py", bad)
    errors = [line for line in r.stdout.splitlines() if ": error:" in line]
    # The one wrong line is caught (the stub is read), and nothing else is reported.
    assert len(errors) == 1 and "bad.py" in errors[0] and '"axis"' in errors[0], r.stdout + r.stderr
