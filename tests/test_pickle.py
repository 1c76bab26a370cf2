"""Pickling of Dim and Tensor (python/dimtorch/_pickle.py): one object graph comes back with one
consistent set of new Dims."""
import io
import pickle

import torch

import dimtorch as dt


def _batch():
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([3, 2]), (batch,)), name="time")
    feat = dt.Dim(4, name="feature")
    return batch, time, feat


def test_tensor_and_dims_roundtrip():
    batch, time, feat = _batch()
    x = dt.Tensor(torch.randn(2, 3, 4), (batch, time, feat), feature_dim=feat, name="x")
    y, time1, feat2 = pickle.loads(pickle.dumps((x, time + 1, feat * 2)))
    b, t, f = y.dims
    assert torch.equal(y.raw, x.raw) and y.name == "x" and y.feature_dim is f
    assert t.dyn_size.dims[0] is b and t.dyn_size.raw.tolist() == [3, 2]
    assert time1 is t + 1 and time1.dyn_size.raw.tolist() == [4, 3]
    assert feat2 is f * 2 and feat2.size == 8
    assert b is not batch  # identity is per process: new Dims


def test_module_with_its_input_through_torch_save():
    batch, time, feat = _batch()
    out = dt.Dim(3, name="out")
    lin = dt.nn.Linear(feat, out)
    x = dt.Tensor(torch.randn(2, 3, 4), (batch, time, feat))
    buf = io.BytesIO()
    torch.save((lin, x), buf)
    buf.seek(0)
    lin2, x2 = torch.load(buf, weights_only=False)
    assert torch.allclose(lin2(x2).raw, lin(x).raw)
