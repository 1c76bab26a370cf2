"""The speech benchmarks' pieces: the ops_bench row of log-mel features on whole-utterance batches agrees with
its PyTorch side (tiny shapes, NaN padding), and bench/speech_curves.py draws two runs' summaries."""
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_log_mel_speech_row_agrees_on_tiny_shapes():
    sys.path.insert(0, str(BENCH))
    try:
        from opsbench import agreement
        from opsbench.cases import make_sides
        from opsbench.frameworks import ReturnnSetup
        from opsbench.rows import ROWS
        from opsbench.rows_speech import SPEECH_ROWS
        from opsbench.shapes import TINY
    finally:
        sys.path.remove(str(BENCH))
    assert all(r in ROWS for r in SPEECH_ROWS)
    sides = make_sides(TINY, ReturnnSetup(None, None, "n/a", False, "not used here"))
    for row in SPEECH_ROWS:
        got = agreement.as_raw(row.dimtorch(sides.dimtorch)(), row.out)
        expected = agreement.as_raw(row.torch(sides.torch)(), row.out)
        assert agreement.disagreement(row, expected, got, sides.torch) == "", row.name


def test_speech_curves_figure_from_two_summaries(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import speech_curves
    finally:
        sys.path.remove(str(BENCH))
    for impl, wer in (("dimtorch", 0.5), ("torch", 0.52)):
        dev = [{"step": s, "seconds": 10.0 * s, "wer": wer + 0.5 / (s + 1), "cer": wer / 2, "loss": 1.0, "ler": 0.3}
               for s in (0, 100, 200)]
        summary = {"task": "speech", "impl": impl, "params": 1000, "dev": dev, "step": 200, "steps_per_s": 5.0,
                   "frames_per_s": 8000.0, "audio_seconds_per_s": 80.0, "final_dev_wer": dev[-1]["wer"],
                   "final_dev_cer": dev[-1]["cer"], "final_dev_beam": {"wer_beam": 0.4}}
        (tmp_path / impl).mkdir()
        (tmp_path / impl / "summary.json").write_text(json.dumps(summary))
    text = speech_curves.main([str(tmp_path / "dimtorch"), str(tmp_path / "torch"), "--out", str(tmp_path / "c.png")])
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert "| dimtorch | 200 |" in text and "| 100 |" in text
