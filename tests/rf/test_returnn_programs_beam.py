"""An eager beam search written as RETURNN user code (tests/rf/returnn_programs/beam_search.py) runs on
RETURNN frontend and, with only its import lines edited, on dimtorch.rf (tests/rf_programs.py): the
hypotheses, their scores and lengths must agree (top_k over [beam, vocab] with nested indices, gather by
backrefs without axis=, a loop ended by a host read, TensorArray stacked onto a dim with lengths over
batch and beam). Skipped without `returnn` (pip install .[bench])."""
import dimtorch.rf  # noqa: F401  (imported before the tests: its module-level dims are no test's leak)
from rf_programs import both, compare_outputs, make_batch, run_forward, unbind


def test_beam_search_gives_returnns_hypotheses():
    ref, ref_model, ours, our_model = both("beam_search")
    try:
        for seed, batch in ((1, 3), (2, 2)):
            raw = make_batch(ref, seed, batch=batch)
            expected = run_forward(ref, ref_model, raw)
            got = run_forward(ours, our_model, raw)
            assert compare_outputs(expected, got) == [], f"batch {seed}"
            assert got["hyps"]["raw"].shape[1] == ref.beam_size
    finally:
        unbind(ref, ours)
