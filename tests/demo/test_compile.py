"""The demo's training step (Conformer + CTC + attention decoder) under torch.compile with the inductor
backend (CPU): equal to eager (loss, gradients, batch norm's running statistics), in one graph for batches
of other lengths and padded sizes; and demo/train.py --compile --decoder aed trains. The slowest tests of
the suite: code generation of the whole model, ~1.5 min on 2 cores with a cold inductor cache (the second
test's graph comes from the first's cache). The CTC-only step is not compiled by inductor on its own: its
graph is this one without the decoder."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from demo import train  # noqa: E402
from demo.compiling import apply_compile_settings  # noqa: E402
from demo.data import SequenceDataset, collate  # noqa: E402
from demo.distributed import HostLengths, LossModule  # noqa: E402
from demo.dimtorch_model import DimtorchConformerCTC  # noqa: E402

from compile_helpers import assert_same  # noqa: E402

# Both compile the same training step (test_demo_trains_compiled's graph then comes from inductor's cache):
# in one worker, one after the other (pytest-xdist's --dist loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("inductor")]


def _batches():
    preset = train.PRESETS["tiny"]
    ds = SequenceDataset(preset["task"], "train", num_seqs=12)
    # Three batches of other sizes (sequences and padded frames) and lengths.
    return [collate([ds[i] for i in idx]) for idx in ([0, 1, 2], [3, 4], [5, 6, 7, 8])]


def _step(module, batch, seed):
    """Loss, parameter gradients and buffers after one forward + backward; dropout drawn from `seed`."""
    for p in module.parameters():
        p.grad = None
    torch.manual_seed(seed)
    lengths = HostLengths(batch.feature_lengths, batch.target_lengths)
    loss = module(batch.features, batch.targets, lengths, int(batch.target_lengths.sum()), batch.features.shape[0])[0]
    loss.backward()
    return (loss.detach(), [p.grad.clone() for p in module.parameters()],
            [b.clone() for b in module.buffers()])


def test_training_step_with_inductor_equals_eager_in_one_graph():
    # The model demo/train.py --config tiny --decoder aed compiles (test_demo_trains_compiled: its graph
    # comes from the compile cache then), dropout included: apply_compile_settings makes inductor draw with
    # torch's kernels (fallback_random), so the same seed gives the same masks on both sides.
    preset = train.PRESETS["tiny"]
    torch.manual_seed(0)
    eager = LossModule(DimtorchConformerCTC(preset["model"], preset["decoder"]))
    twin = copy.deepcopy(eager)
    compiled = torch.compile(twin, fullgraph=True, dynamic=True, backend="inductor")
    restore = apply_compile_settings()
    try:
        graphs = []
        for i, batch in enumerate(_batches()):
            want, got = _step(eager, batch, i), _step(compiled, batch, i)
            for part, what in zip(range(3), ("loss", "gradients", "buffers")):
                assert_same(got[part], want[part], what=f"{what}, batch {i}")
            graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        # The first batch compiles (the backend may be called twice when Dynamo restarts its analysis
        # to specialize the static feature size); the batches of other sizes after it reuse the graph.
        assert graphs[1:] == graphs[:1] * (len(graphs) - 1), graphs
    finally:
        restore()
        torch._dynamo.reset()


def test_demo_trains_compiled(tmp_path):
    """--compile --decoder aed: the joint CTC + attention-decoder step compiles once (one dynamic graph; the
    decoder's greedy evaluation stays eager) and trains (issue 23, deliverable 3)."""
    restore = apply_compile_settings()  # what train.main applies for the process, undone after
    # Batches of at most 200 padded frames (2-12 sequences): one dynamic graph serves them all. (Torch picks
    # the CPU convolution backend by batch size: its depthwise conv guards on 16 <= sequences <= 4096, so
    # the preset's 300 frames, whose first batch holds 17 sequences, compile a second graph for the rest.)
    try:
        summary = train.main(["--task", "synthetic", "--config", "tiny", "--no-progress", "--out", str(tmp_path),
                              "--steps", "4", "--eval-every", "4", "--compile", "--decoder", "aed",
                              "--batch-frames", "200"])
        assert summary["step"] == 4 and summary["decoder"] == "aed"
        assert summary["compile"]["steps_that_compiled"] == 1, summary["compile"]
        assert summary["compile"]["graphs"] <= 2, summary["compile"]
        assert torch.isfinite(torch.tensor(summary["final_train_loss"]))
        assert summary["final_dev_aed_ler"] is not None
    finally:
        restore()
        torch._dynamo.reset()
