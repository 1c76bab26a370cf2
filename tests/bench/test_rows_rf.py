"""bench/opsbench/rows_rf.py: every row of the rf-coverage ops builds on tiny shapes and dimtorch agrees with PyTorch."""
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_rf_rows_are_listed_and_agree():
    sys.path.insert(0, str(BENCH))
    try:
        from opsbench import agreement
        from opsbench.cases import make_sides
        from opsbench.frameworks import ReturnnSetup
        from opsbench.rows import ROWS
        from opsbench.rows_rf import RF_ROWS
        from opsbench.shapes import TINY
    finally:
        sys.path.remove(str(BENCH))
    names = [r.name for r in ROWS]
    assert all(r.name in names for r in RF_ROWS) and len(set(names)) == len(names)
    sides = make_sides(TINY, ReturnnSetup(None, None, "n/a", False, "not used here"))
    for row in RF_ROWS:
        if row.check == "none":  # random (specaugment): built and run, values not comparable
            row.dimtorch(sides.dimtorch)()
            continue
        expected = agreement.as_raw(row.torch(sides.torch)(), row.out)
        got = agreement.as_raw(row.dimtorch(sides.dimtorch)(), row.out)
        assert agreement.disagreement(row, expected, got, sides.torch) == "", row.name
