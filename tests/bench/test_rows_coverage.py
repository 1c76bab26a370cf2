"""bench/opsbench rows of the RETURNN-coverage ops (rows_attention/signal/loop/decoding.py): each builds on tiny
shapes and dimtorch agrees with the hand-written PyTorch side."""
from opsbench_rows import check_rows_listed_and_agree
from repo_scripts import bench_on_path


def test_coverage_rows_agree_on_tiny_shapes():
    with bench_on_path():
        from opsbench.rows_attention import ATTENTION_ROWS
        from opsbench.rows_decoding import DECODING_ROWS
        from opsbench.rows_loop import LOOP_ROWS
        from opsbench.rows_signal import SIGNAL_ROWS
    check_rows_listed_and_agree(ATTENTION_ROWS + SIGNAL_ROWS + LOOP_ROWS + DECODING_ROWS)
