"""The benchmark gate (bench/gate.py) runs in --quick mode: the train step and its rows against the recorded
figures (bench/gate_figures.json, which names every item it runs), its table, and the short summary last. No
timing assertions."""
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_quick_run_prints_the_table_and_ends_with_the_summary(tmp_path):
    out = tmp_path / "gate.json"
    run = subprocess.run([sys.executable, str(BENCH / "gate.py"), "--quick", "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[0].startswith("| item | dimtorch / torch now (IQR) | recorded |")
    assert any(line.startswith("| train_step_small | ") for line in lines)
    summary = lines[-6:]
    assert summary[0].startswith("gate: ") and summary[1].startswith("train step (small): ")
    assert summary[2].startswith("rows: geometric mean ") and summary[3].startswith("slower beyond noise: ")
    assert summary[4].startswith("faster beyond noise: ") and summary[5].startswith("gate: ")
    figures = json.loads(out.read_text())
    recorded = json.loads((BENCH / "gate_figures.json").read_text())
    assert set(figures["items"]) == set(recorded["items"])
    for item in figures["items"].values():
        assert item["ratio"] > 0 and item["interval"][0] <= item["ratio"] <= item["interval"][1]
