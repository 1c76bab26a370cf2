"""Tests of the pytree registration (python/dimtorch/_capture/pytree.py): Tensors flatten to their raws."""
import pytest
import torch
import torch.utils._pytree as pytree

import dimtorch as dt
from helpers import make_padded_batch


def test_flatten_unflatten_roundtrip():
    bd = make_padded_batch((3, 2), 4)
    classes = dt.Dim(5, name="classes")
    labels = dt.Tensor(torch.tensor([[1, 2, 0], [4, 0, 0]]), (bd.batch, bd.time), sparse_dim=classes, name="labels")
    tree = {"x": bd.x, "more": [labels, 7, (bd.x, None)], "raw": torch.ones(2)}
    leaves, spec = pytree.tree_flatten(tree)
    # One leaf per Tensor (its raw), plus the other leaves.
    assert sum(1 for leaf in leaves if leaf is bd.x.raw) == 2
    assert any(leaf is labels.raw for leaf in leaves)
    assert not any(isinstance(leaf, dt.Tensor) for leaf in leaves)
    back = pytree.tree_unflatten(leaves, spec)
    assert isinstance(back["x"], dt.Tensor) and back["x"] is not bd.x
    assert back["x"].raw is bd.x.raw and back["x"].dims == bd.x.dims
    assert back["x"].feature_dim is bd.feature
    lab = back["more"][0]
    assert lab.sparse_dim is classes and lab.name == "labels" and lab.dims == (bd.batch, bd.time)
    assert back["more"][1] == 7 and back["more"][2][1] is None
    assert back["raw"] is tree["raw"]


def test_tree_map_over_raws():
    bd = make_padded_batch((3, 2), 4, pad_value=0.0)
    tree = {"a": bd.x, "b": [bd.x * 2.0]}
    doubled = pytree.tree_map(lambda r: r * 2, tree)
    assert isinstance(doubled["a"], dt.Tensor) and doubled["a"].dims == bd.x.dims
    torch.testing.assert_close(doubled["a"].raw, bd.x.raw * 2)
    torch.testing.assert_close(doubled["b"][0].raw, bd.x.raw * 4)


def test_unflatten_checks_the_new_raw():
    # Replacing leaves goes through the checked constructor: a raw of the wrong shape is refused.
    bd = make_padded_batch((3, 2), 4)
    leaves, spec = pytree.tree_flatten([bd.x])
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\(\): raw has shape torch\.Size\(\[2, 2\]\) \(2 axes\) but 3 dims"):
        pytree.tree_unflatten([torch.zeros(2, 2)], spec)
