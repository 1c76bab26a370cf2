"""Smoke test: the package imports and a named add matches torch."""
import torch

import dimtorch as dt


def test_add_matches_torch():
    batch, feat = dt.Dim(None, name="batch"), dt.Dim(4, name="feature")
    a = dt.Tensor(torch.randn(2, 4), (batch, feat))
    b = dt.Tensor(torch.randn(4), (feat,))
    assert torch.equal((a + b).raw, a.raw + b.raw)
