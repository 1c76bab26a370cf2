"""bench/opsbench/rows_rf.py: every row of the rf-coverage ops builds on tiny shapes and dimtorch agrees with PyTorch."""
from opsbench_rows import check_rows_listed_and_agree
from repo_scripts import bench_on_path


def test_rf_rows_are_listed_and_agree():
    with bench_on_path():
        from opsbench.rows_rf import RF_ROWS
    check_rows_listed_and_agree(RF_ROWS)
