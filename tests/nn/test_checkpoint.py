"""Tests of dt.nn.save_checkpoint/load_checkpoint: roundtrip with optimizer and extra, mismatch reports, corrupt files, atomic writes."""
import os

import pytest
import torch

import dimtorch as dt


class Net(dt.nn.Module):
    def __init__(self, a, b, c):
        super().__init__()
        self.lin = dt.nn.Linear(a, b)
        self.norm = dt.nn.BatchNorm(b)
        self.out = dt.nn.Parameter((b, c), init=dt.nn.init.Glorot(), in_dims=(b,))


def _step(net, opt, a, batch):
    x = dt.Tensor(torch.randn(3, a.size), (batch, a))
    h = net.norm(net.lin(x))
    loss = dt.reduce_sum(dt.matmul(h, net.out, reduce=net.lin.out_dim) ** 2, axis=h.dims[:1] + net.out.dims[1:])
    opt.zero_grad()
    loss.raw.backward()
    opt.step()


def test_roundtrip_with_optimizer_and_extra(tmp_path):
    batch, a, b, c = dt.Dim(None, name="batch"), dt.Dim(3, name="a"), dt.Dim(4, name="b"), dt.Dim(2, name="c")
    net = Net(a, b, c)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    _step(net, opt, a, batch)
    path = tmp_path / "model.pt"
    dt.nn.save_checkpoint(path, net, opt, extra={"epoch": 3, "step": 17})
    assert os.listdir(tmp_path) == ["model.pt"]  # no temporary file left
    net2 = Net(a, b, c)
    opt2 = torch.optim.Adam(net2.parameters(), lr=0.01)
    extra = dt.nn.load_checkpoint(path, net2, opt2)
    assert extra == {"epoch": 3, "step": 17}
    for (k, v), (k2, v2) in zip(net.state_dict().items(), net2.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    torch.manual_seed(0)
    _step(net, opt, a, batch)
    torch.manual_seed(0)
    _step(net2, opt2, a, batch)
    for p, q in zip(net.parameters(), net2.parameters()):
        torch.testing.assert_close(p, q)  # optimizer state was restored too


def test_mismatch_reports_everything_and_loads_nothing(tmp_path):
    a, b, c = dt.Dim(3, name="a"), dt.Dim(4, name="b"), dt.Dim(2, name="c")
    path = tmp_path / "model.pt"
    dt.nn.save_checkpoint(path, Net(a, b, c))
    # same shapes, other dim names: out is (b', c') with b'/c' swapped in name
    c2, b2 = dt.Dim(4, name="c"), dt.Dim(2, name="b")
    other = Net(a, dt.Dim(4, name="b"), c)
    other.out = dt.nn.Parameter((c2, b2))
    other.extra_w = dt.nn.Parameter((c,))
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(dt.nn.CheckpointError) as e:
        dt.nn.load_checkpoint(path, other)
    msg = str(e.value)
    assert msg.startswith("dimtorch.nn.load_checkpoint() ") and str(path) in msg
    assert "missing: extra_w ('c'(2))" in msg
    assert "dims: out is (c, b) in the module, (b, c) in the state dict" in msg
    assert "nothing was loaded" in msg
    for k, v in other.state_dict().items():
        assert torch.equal(v, before[k])
    small = Net(a, dt.Dim(5, name="b"), c)
    with pytest.raises(dt.nn.CheckpointError,
                       match=r"shape: lin.weight is \('b'\(5\), 'a'\(3\)\) = \(5, 3\) in the module, \(4, 3\)"):
        dt.nn.load_checkpoint(path, small)
    net = Net(a, b, c)
    with pytest.raises(dt.nn.CheckpointError, match="holds no optimizer state"):
        dt.nn.load_checkpoint(path, net, torch.optim.SGD(net.parameters(), lr=0.1))


def test_corrupt_and_foreign_files(tmp_path):
    a, b, c = dt.Dim(3, name="a"), dt.Dim(4, name="b"), dt.Dim(2, name="c")
    net = Net(a, b, c)
    path = tmp_path / "model.pt"
    dt.nn.save_checkpoint(path, net)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(dt.nn.CheckpointError, match=r"cannot read '.*model.pt': the file is corrupt"):
        dt.nn.load_checkpoint(path, net)
    path.write_bytes(b"garbage")
    with pytest.raises(dt.nn.CheckpointError, match="corrupt"):
        dt.nn.load_checkpoint(path, net)
    torch.save({"weight": torch.zeros(1)}, path)
    with pytest.raises(dt.nn.CheckpointError, match="not a dimtorch checkpoint"):
        dt.nn.load_checkpoint(path, net)
    with pytest.raises(FileNotFoundError, match="no checkpoint file at"):
        dt.nn.load_checkpoint(tmp_path / "missing.pt", net)


def test_crash_while_saving_keeps_the_old_file(tmp_path, monkeypatch):
    a, b, c = dt.Dim(3, name="a"), dt.Dim(4, name="b"), dt.Dim(2, name="c")
    net = Net(a, b, c)
    path = tmp_path / "model.pt"
    dt.nn.save_checkpoint(path, net, extra={"v": 1})
    old = path.read_bytes()

    def crashing_save(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise KeyboardInterrupt("crash")

    monkeypatch.setattr(torch, "save", crashing_save)
    with pytest.raises(KeyboardInterrupt):
        dt.nn.save_checkpoint(path, net, extra={"v": 2})
    monkeypatch.undo()
    assert path.read_bytes() == old
    assert os.listdir(tmp_path) == ["model.pt"]
    assert dt.nn.load_checkpoint(path, Net(a, b, c)) == {"v": 1}


class _RunsCode:
    """Unpickles as exec(...): what a checkpoint from someone else may hold."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def test_a_checkpoint_holding_code_is_refused_and_nothing_runs(tmp_path):
    a, b, c = dt.Dim(3, name="a"), dt.Dim(4, name="b"), dt.Dim(2, name="c")
    net = Net(a, b, c)
    path, marker = tmp_path / "model.pt", tmp_path / "ran.txt"
    dt.nn.save_checkpoint(path, net, extra={"step": 1})
    state = torch.load(path, weights_only=True)
    state["extra"] = {"step": 1, "hook": _RunsCode(marker)}
    torch.save(state, path)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.raises(dt.nn.CheckpointError,
                       match=r"load_checkpoint\(\): refused to load .*model.pt.*GLOBAL exec was not an allowed "
                             r"global.*nothing in it was run"):
        dt.nn.load_checkpoint(path, net)
    assert not marker.exists()
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())  # nothing loaded


def test_dims_and_tensors_in_extra_load_without_running_code(tmp_path):
    batch, a, b, c = dt.Dim(None, name="batch"), dt.Dim(3, name="a"), dt.Dim(4, name="b"), dt.Dim(2, name="c")
    time = dt.Dim(dt.Tensor(torch.tensor([2, 1]), (batch,)), name="time")
    net = Net(a, b, c)
    x = dt.Tensor(torch.randn(2, 2, 3), (batch, time, a), feature_dim=a)
    path = tmp_path / "model.pt"
    dt.nn.save_checkpoint(path, net, extra={"x": x, "dims": (time + 1, a * 2)})
    extra = dt.nn.load_checkpoint(path, Net(a, b, c))
    x2, (t1, a2) = extra["x"], extra["dims"]
    b2, time2, f2 = x2.dims
    assert torch.equal(x2.raw, x.raw) and x2.feature_dim is f2 and time2.lengths.dims == (b2,)
    assert t1 is time2 + 1 and t1.lengths.raw.tolist() == [3, 2] and a2 is f2 * 2
