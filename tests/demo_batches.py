"""The small task and dev batches of the demo's model tests (tests/demo/test_equivalence.py, test_decoder.py):
the demo's own data and collate, optionally with a sequence of no frames and one of no labels."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from demo.data import SequenceDataset, TaskConfig, collate  # noqa: E402

TASK = TaskConfig(num_labels=7, feature_dim=12, max_labels=6, min_duration=4, max_duration=7)


def dev_batch(n=6, with_empty=False):
    """The first n dev sequences; with_empty inserts an empty sequence (no frames, no labels) at 2 and one
    with frames but no labels at 4."""
    ds = SequenceDataset(TASK, "dev", n)
    items = [ds[i] for i in range(n)]
    if with_empty:
        items.insert(2, (torch.zeros(0, TASK.feature_dim), torch.zeros(0, dtype=torch.int64)))
        items.insert(4, (torch.randn(6, TASK.feature_dim), torch.zeros(0, dtype=torch.int64)))
    return collate(items)
