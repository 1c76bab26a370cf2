"""bench/nn_layers_bench.py runs in --quick mode on the tiny Linear rows: table and JSON written, all sides agree.

No timing assertions."""
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "nn_layers_bench.py"


def test_quick_run_writes_table_and_json_and_implementations_agree(tmp_path):
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--shapes", "tiny", "--filter", "^Linear", "--rounds", "3",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "| layer | torch_us | dimtorch_us | ratio | returnn_us | returnn_ratio | weights |" in run.stdout
    assert "| Linear fwd |" in run.stdout and "| Linear fwd+bwd |" in run.stdout
    assert "DIFFERS" not in run.stdout and "ERROR" not in run.stdout
    assert (tmp_path / "nn_layers_bench.md").read_text().startswith("# dimtorch layer benchmark")

    document = json.loads((tmp_path / "nn_layers_bench.json").read_text())
    (tiny,) = document["shape_sets"]
    assert tiny["name"] == "tiny"
    assert [r["row"] for r in tiny["rows"]] == ["Linear fwd", "Linear fwd+bwd"]
    for row in tiny["rows"]:
        assert row["impls"]["torch"]["status"] == "ok"
        assert row["impls"]["dimtorch"]["status"] == "ok" and row["ratio"] > 0
        assert row["impls"]["returnn"]["status"] in ("ok", "n/a")
        assert row["weights"] == "same"
