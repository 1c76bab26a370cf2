"""The check that rows of bench/opsbench's table are listed in it and agree (tests/bench/test_rows_*.py):
each row builds on tiny shapes, and its dimtorch side gives what its hand-written PyTorch side gives."""
from repo_scripts import bench_on_path

with bench_on_path():
    from opsbench import agreement
    from opsbench.cases import make_sides
    from opsbench.frameworks import ReturnnSetup
    from opsbench.rows import ROWS
    from opsbench.shapes import TINY


def check_rows_listed_and_agree(rows):
    names = [r.name for r in ROWS]
    assert all(r.name in names for r in rows) and len(set(names)) == len(names)
    sides = make_sides(TINY, ReturnnSetup(None, None, "n/a", False, "not used here"))
    for row in rows:
        got = row.dimtorch(sides.dimtorch)()
        if row.check == "none":  # random (specaugment): built and run, values not comparable
            continue
        expected = agreement.as_raw(row.torch(sides.torch)(), row.out)
        assert agreement.disagreement(row, expected, agreement.as_raw(got, row.out), sides.torch) == "", row.name
