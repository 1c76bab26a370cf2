"""The overhead benchmark runs end to end in --quick mode on two rows: table, JSON and PNG, outputs agree."""
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "ops_bench.py"
ROWS = ("add_same_dims", "reduce_mean_masked")


def test_quick_run_writes_table_json_png_and_implementations_agree(tmp_path):
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--shapes", "tiny", "--out", str(tmp_path),
         "--filter", "^(" + "|".join(ROWS) + ")$"],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr

    assert "| op | torch_us | dimtorch_us | ratio | returnn_us | returnn_ratio |" in run.stdout
    assert "Geometric mean ratio" in run.stdout
    for row in ROWS:
        assert f"| {row} |" in run.stdout

    document = json.loads((tmp_path / "ops_bench.json").read_text())
    (tiny,) = document["shape_sets"]
    assert [r["row"] for r in tiny["rows"]] == list(ROWS)
    for row in tiny["rows"]:
        statuses = {impl: outcome["status"] for impl, outcome in row["impls"].items()}
        assert statuses["torch"] == "ok", row
        assert statuses["dimtorch"] in ("ok", "skipped"), row
        assert statuses["returnn"] in ("ok", "n/a"), row
        if statuses["dimtorch"] == "ok":
            assert row["ratio"] > 0

    assert (tmp_path / "ops_bench.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "ops_bench.md").read_text().startswith("# dimtorch overhead benchmark")


def test_agreement_check_catches_padding_leak_and_aligns_by_dim_name():
    sys.path.insert(0, str(BENCH.parent))
    try:
        import torch

        import dimtorch as dt
        from opsbench import agreement
        from opsbench.data import make_raw, make_torch_side
        from opsbench.rows import ROWS
        from opsbench.shapes import TINY
    finally:
        sys.path.remove(str(BENCH.parent))
    side = make_torch_side(make_raw(TINY), TINY)
    row = next(r for r in ROWS if r.name == "reduce_mean_masked")
    masked_mean = row.torch(side)()
    assert agreement.disagreement(row, masked_mean, masked_mean.clone(), side) == ""
    assert "difference" in agreement.disagreement(row, masked_mean, side.x.mean(dim=1), side)

    batch, feature = dt.Dim(None, name="batch"), dt.Dim(TINY.feature, name="feature")
    feature_major = dt.Tensor(masked_mean.t().contiguous(), (feature, batch))
    assert torch.equal(agreement.as_raw(feature_major, row.out), masked_mean)
