"""bench/callgrind_overhead.py: its reading of callgrind's output (self cost per object, names defined by ob=
or cob= lines, a call's inclusive cost not counted as the caller's), and, where valgrind and a C compiler are
installed, one real run on a row."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repo_scripts import ROOT, load_script

SCRIPT = ROOT / "bench" / "callgrind_overhead.py"


def _tool():
    return load_script("bench/callgrind_overhead.py")


DUMP = """# callgrind format
desc: Trigger: Client Request: merge_dims|dimtorch
positions: line
events: Ir
ob=(1) /x/site-packages/dimtorch/_C.cpython-311-x86_64-linux-gnu.so
fn=(1) parse
0 700
cob=(2) /usr/lib/libpython3.11.so.1.0
cfn=(2) PyTuple_New
calls=1 0
0 5000
ob=(2)
fn=(2)
0 300
ob=(3) /x/torch/lib/libtorch_cpu.so
fn=(3) at::view
+2 40
* 2
"""


def test_self_costs_per_part(tmp_path):
    tool = _tool()
    dump = tmp_path / "callgrind.out.1"
    dump.write_text(DUMP)
    trigger, parts = tool.exclusive_by_part(dump, {})
    assert trigger == "merge_dims|dimtorch"
    assert parts == {"dimtorch._C": 700, "python": 300, "torch": 42}


def test_parts_of_objects():
    tool = _tool()
    assert tool.part_of("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0") == "python"
    assert tool.part_of("/usr/bin/python3.11") == "python"
    assert tool.part_of("/v/site-packages/torch/lib/libc10.so") == "torch"
    assert tool.part_of("/usr/lib/x86_64-linux-gnu/libc.so.6") == "libc & system"
    assert tool.part_of("???") == "other"


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("cc") is None
                    or not Path("/usr/include/valgrind/callgrind.h").exists(),
                    reason="needs valgrind (with its headers) and a C compiler")
@pytest.mark.slow  # builds a C helper, runs a row under valgrind
def test_a_real_count(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--filter", "^merge_dims$", "--calls", "20"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("| merge_dims |"))
    torch_ir, dimtorch_ir = (float(c.replace(",", "")) for c in line.split("|")[2:4])
    assert 1000 < torch_ir < dimtorch_ir < 10 * torch_ir
