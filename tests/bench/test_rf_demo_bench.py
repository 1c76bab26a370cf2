"""bench/rf_demo_bench.py on RETURNN's demo-rf-pt-benchmark.py (from a RETURNN checkout: $RETURNN_DEMO_RF_PT;
skipped without it or without returnn): `check` gives RETURNN's loss at RETURNN's initial weights on
dimtorch.rf (1e-4), trains a step, and its eager beam search returns RETURNN's hypotheses at the same weights; `bench` runs one timed round of
each implementation and writes its JSON. No timing assertions."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "rf_demo_bench.py"
DEMO = os.environ.get("RETURNN_DEMO_RF_PT")

pytestmark = pytest.mark.skipif(not DEMO or not os.path.exists(DEMO),
                                reason="set RETURNN_DEMO_RF_PT to RETURNN's demos/demo-rf-pt-benchmark.py")


def _run(tmp_path, *args):
    pytest.importorskip("returnn")
    out = tmp_path / "out.json"
    run = subprocess.run([sys.executable, str(BENCH), *args, "--demo", DEMO, "--out", str(out)],
                         capture_output=True, text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


def test_check_loss_equal_training_and_beam_search(tmp_path):
    res = _run(tmp_path, "check", "--batch", "16", "--steps", "1")
    assert res["equal"], res["abs_diff"]
    assert abs(res["returnn"]["ce:summed"] - res["dimtorch_rf"]["ce:summed"]) <= 1e-4
    assert len(res["train_losses"]) == 1
    beam = res["beam"]
    assert beam["equal"], "beam search: hypotheses, lengths or log probs differ from RETURNN's"
    assert beam["dimtorch_rf"]["beam"] == 12 and len(beam["dimtorch_rf"]["hyps"]) == 8


def test_bench_one_round(tmp_path):
    res = _run(tmp_path, "bench", "--dec-dims", "64,128,128", "--rounds", "1", "--warmup", "0", "--own-api",
               "--block", "2")
    assert set(res["wall_ms"]) == {"returnn", "dimtorch", "dimtorch_own"}
    assert res["params"]["returnn"] == res["params"]["dimtorch"]
    assert res["block"] == 2 and res["timed_steps_per_round"] == 1  # a block's first step is not timed
