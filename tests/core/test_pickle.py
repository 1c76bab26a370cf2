"""Pickling of Dim and Tensor (python/dimtorch/_pickle.py): one object graph comes back with one
consistent set of new Dims."""
import io
import os
import pathlib
import pickle

import pytest
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
    assert t.lengths.dims[0] is b and t.lengths.raw.tolist() == [3, 2]
    assert time1 is t + 1 and time1.lengths.raw.tolist() == [4, 3]
    assert feat2 is f * 2 and feat2.size == 8
    assert b is not batch  # identity is per process: new Dims


def test_module_with_its_input_through_pickle():
    # A whole module (classes and all) pickles, e.g. to another process; as data files, states are
    # loaded with weights_only=True (next test), which builds no module classes.
    batch, time, feat = _batch()
    out = dt.Dim(3, name="out")
    lin = dt.nn.Linear(feat, out)
    x = dt.Tensor(torch.randn(2, 3, 4), (batch, time, feat))
    lin2, x2 = pickle.loads(pickle.dumps((lin, x)))
    assert torch.allclose(lin2(x2).raw, lin(x).raw)


def test_dims_and_tensors_load_with_weights_only():
    batch, time, feat = _batch()
    x = dt.Tensor(torch.randn(2, 3, 4), (batch, time, feat), feature_dim=feat, name="x")
    state = {"x": x, "lengths": time.lengths, "dims": [time + 1, dt.ceildiv(time, 2) - 1, time + time, feat * 2],
             "weight": dt.Tensor(torch.randn(4), (feat,))}
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)  # no code from the file runs
    b, t, f = loaded["x"].dims
    t1, t2, t3, f2 = loaded["dims"]
    assert loaded["x"].name == "x" and loaded["x"].feature_dim is f and loaded["weight"].dims == (f,)
    assert loaded["lengths"].dims == (b,) and t.lengths.raw.tolist() == [3, 2]
    assert t1 is t + 1 and t2 is dt.ceildiv(t, 2) - 1 and t3 is t + t and f2 is f * 2
    assert t3.lengths.raw.tolist() == [6, 4]


def test_weights_only_loading_checks_what_it_rebuilds():
    from dimtorch import _pickle
    _, time, _ = _batch()
    with pytest.raises(TypeError, match="cannot unpickle a derived dim"):
        _pickle.rebuild_derived_dim("add", "time", None, 1)
    with pytest.raises(ValueError, match="cannot unpickle a dim made by 'pow'"):
        _pickle.rebuild_derived_dim("pow", time, None, 2)
    with pytest.raises(TypeError, match="cannot unpickle a derived dim"):
        _pickle.rebuild_derived_dim("add", time, None, 1.5)


def test_no_loading_that_can_run_code_in_the_project():
    root = pathlib.Path(__file__).resolve().parents[2]
    needle = "weights_only" + "=False"  # spelled so that this file does not match itself
    skip_dirs = {".git", "build", "runs", "out", "__pycache__", ".hypothesis", "node_modules"}
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip_dirs and not d.startswith(".venv")]
        for name in files:
            if name.endswith((".py", ".sh", ".ipynb")):  # code; the docs may name the flag
                path = pathlib.Path(folder, name)
                if needle in path.read_text(errors="replace"):
                    found.append(path.relative_to(root).as_posix())
    assert not found, f"torch.load with {needle} (a file could run code) in: {', '.join(sorted(found))}"


# Files written by dimtorch before its modules moved into folders (tests/core/data/*_before_folders.*,
# made with commit d96a820): pickles name the rebuilding functions by module path, so these pin that a
# move never breaks a saved state, pickle or checkpoint.
DATA = pathlib.Path(__file__).resolve().parent / "data"


def _check_saved_state(state):
    x, y = state["x"], state["y"]
    batch, time, feat = x.dims
    assert x.feature_dim is feat and feat.size == 4 and time.lengths.raw.tolist() == [3, 2]
    assert y.dims[0] is batch and y.dims[1] is time + 1 and y.sparse_dim.size == 10
    torch.testing.assert_close(y.raw, torch.arange(8).reshape(2, 4))


def test_a_pickle_from_before_the_move_loads():
    with open(DATA / "tensor_before_folders.pkl", "rb") as f:
        state = pickle.load(f)
    _check_saved_state(state)
    assert state["t1"] is state["x"].dims[1] + 1


def test_a_torch_save_from_before_the_move_loads_with_weights_only():
    state = torch.load(DATA / "state_before_folders.pt", weights_only=True)
    _check_saved_state(state)
    assert state["dims"][3] is state["dims"][1] + 1 and set(state["model"]) == {"weight", "bias"}


def test_a_checkpoint_from_before_the_move_loads():
    feat = dt.Dim(4, name="feature")
    lin = dt.nn.Linear(feat, dt.Dim(5, name="out"))
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    extra = dt.nn.load_checkpoint(DATA / "checkpoint_before_folders.pt", lin, opt)
    assert extra == {"step": 3}
    torch.testing.assert_close(lin.weight.raw.detach(), torch.load(DATA / "checkpoint_before_folders.weight.pt"))
    assert opt.state_dict()["state"][0]["momentum_buffer"] is not None
