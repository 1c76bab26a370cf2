"""bench/gpu_check.py (issue 23's GPU check) in its CPU dry run: every stage of the attention-decoder model
(eager and compiled; check_syncs --cpu) runs and one JSON holds their figures. No timing assertions.
The compiled stages use backend eager (Dynamo's capture alone): this checks the script; the compiled training
itself, through AOTAutograd and inductor, is tested by tests/demo/test_compile.py and test_distributed.py. The
run takes the attention-decoder model alone (--models aed): the demo model's two stages go through the same
code of the script with one flag fewer (their step compiles in test_compile.py, inside the AED model's)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


@pytest.mark.slow
def test_dry_run_on_the_cpu_writes_one_json(tmp_path):
    out = tmp_path / "gpu_check.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--dry-run", "--compile-backend", "eager",
                          "--models", "aed", "--out", str(out)],
                         capture_output=True, text=True, timeout=1200)
    report = json.loads(out.read_text())
    assert run.returncode == 0, json.dumps({k: v["status"] for k, v in report["stages"].items()}) + run.stderr[-2000:]
    assert set(report["stages"]) == {"aed eager", "aed compiled", "check_syncs"}
    assert report["header"]["models"] == ["aed"]
    stage = report["stages"]["aed compiled"]
    assert stage["compile"]["backend"] == "eager" and stage["compile"]["graphs"] >= 1, stage
    assert list(report["ratios"]) == ["aed: compiled / eager step"], report["ratios"]
    assert all(v is not None for v in report["ratios"].values()), report["ratios"]
