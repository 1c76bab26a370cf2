"""The training-step benchmark (bench/train_bench.py) runs end to end in --quick mode on the small config
with 1 round (2 timed steps per implementation), with the data-parallel scaling of 1 and 2 processes
(--nproc 2): Markdown table, JSON and PNG are written, and both implementations give the same loss at
step 0 (same weights, same batch). No timing assertions."""
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import dimtorch as dt
from repo_scripts import bench_on_path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "train_bench.py"

pytestmark = pytest.mark.skipif(not hasattr(dt.nn, "ConformerEncoder"),
                                reason="dimtorch.nn.ConformerEncoder (issue 6) not there yet")


@pytest.mark.slow  # the benchmark end to end, with 2 data-parallel processes
def test_quick_small_run_writes_table_json_png_and_losses_agree(tmp_path):
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--configs", "small", "--rounds", "1", "--no-returnn",
         "--nproc", "2", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr

    assert "| config | params | batch (seqs × padded frames) | what | torch | dimtorch | ratio (IQR) |" in run.stdout
    assert "| small | 0.31 M |" in run.stdout
    assert "peak memory of a step" in run.stdout
    assert "meta device" in run.stdout

    document = json.loads((tmp_path / "train_bench.json").read_text())
    (small,) = document["configs"]
    assert small["name"] == "small"
    loss0 = small["loss_step0"]
    assert loss0["torch"] == pytest.approx(loss0["dimtorch"], rel=1e-5)
    assert loss0["rel_diff"] <= 1e-5
    for impl in ("torch", "dimtorch"):
        assert small["step"][impl]["rounds"] == 1
        assert small["step"][impl]["median_ms"] > 0
        assert small["memory"][impl] > 0
    assert small["step"]["ratio"] > 0
    assert small["meta"]["status"] in ("ok", "skipped")
    assert small["returnn"]["status"] == "not run"

    scaling = document["scaling"]
    assert scaling["nproc"] == 2 and scaling["config"] == "small" and set(scaling["processes"]) == {"1", "2"}
    for n in ("1", "2"):
        for impl in ("torch", "dimtorch"):
            assert scaling["processes"][n][impl]["samples_per_s"] > 0
    assert scaling["speedup"]["dimtorch"] > 0
    assert "## Data parallel: samples/s with 1 and 2 processes" in run.stdout and "| speed-up 1 → 2 |" in run.stdout

    assert (tmp_path / "train_bench.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "train_bench.md").read_text().startswith("# Training step: dimtorch vs PyTorch reference")


def _refused(argv, capsys):
    """The script's parse_args, in this process (argparse's exit 2 and its message): no process of its own."""
    with bench_on_path():
        script = importlib.import_module("train_bench")
    with pytest.raises(SystemExit) as exit_:
        script.parse_args(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_unknown_config_is_refused(tmp_path, capsys):
    err = _refused(["--configs", "huge", "--out", str(tmp_path)], capsys)
    assert "unknown" in err and "small" in err


def test_nproc_below_two_is_refused(tmp_path, capsys):
    assert "--nproc must be >= 2" in _refused(["--nproc", "1", "--out", str(tmp_path)], capsys)
