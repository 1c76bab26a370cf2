"""bench/opsbench/rows_array.py: every array-op row builds on tiny shapes and dimtorch agrees with PyTorch."""
from opsbench_rows import check_rows_listed_and_agree
from repo_scripts import bench_on_path


def test_array_rows_are_listed_and_agree():
    with bench_on_path():
        from opsbench.rows_array import ARRAY_ROWS
    check_rows_listed_and_agree(ARRAY_ROWS)
