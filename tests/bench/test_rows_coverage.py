"""bench/opsbench rows of the RETURNN-coverage ops (rows_attention/signal/loop/decoding.py): each builds on tiny
shapes and dimtorch agrees with the hand-written PyTorch side."""
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _rows_and_sides():
    sys.path.insert(0, str(BENCH))
    try:
        from opsbench import agreement
        from opsbench.cases import make_sides
        from opsbench.frameworks import ReturnnSetup
        from opsbench.rows import ROWS
        from opsbench.rows_attention import ATTENTION_ROWS
        from opsbench.rows_decoding import DECODING_ROWS
        from opsbench.rows_loop import LOOP_ROWS
        from opsbench.rows_signal import SIGNAL_ROWS
        from opsbench.shapes import TINY
    finally:
        sys.path.remove(str(BENCH))
    rows = ATTENTION_ROWS + SIGNAL_ROWS + LOOP_ROWS + DECODING_ROWS
    names = [r.name for r in ROWS]
    assert all(r.name in names for r in rows) and len(set(names)) == len(names)
    return agreement, rows, make_sides(TINY, ReturnnSetup(None, None, "n/a", False, "not used here"))


def test_coverage_rows_agree_on_tiny_shapes():
    agreement, rows, sides = _rows_and_sides()
    for row in rows:
        result = row.dimtorch(sides.dimtorch)()
        if row.check == "none":
            continue
        got = agreement.as_raw(result, row.out)
        expected = agreement.as_raw(row.torch(sides.torch)(), row.out)
        assert agreement.disagreement(row, expected, got, sides.torch) == "", row.name
