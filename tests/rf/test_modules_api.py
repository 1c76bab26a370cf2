"""dimtorch.rf.Module and rf.Parameter as RETURNN code uses them: __call__-style and forward-style modules,
parameters read as the rf.Parameter (a dimtorch Tensor whose raw is the registered torch Parameter), its
initial/assign/assign_add/weight_decay/trainable/auxiliary, auxiliary parameters as buffers, state dict keys as
RETURNN's, deep copies (new initial values, or shared), hooks, parametrizations, build_from_dict, RETURNN
checkpoints (written by RETURNN's own torch wrapper, read back by RETURNN)."""
import copy

import pytest
import torch

import dimtorch as dt
import dimtorch.rf as drf
from dimtorch.rf.build_from_dict import build_dict, build_from_dict


def _dims():
    return dt.Dim(None, name="batch"), dt.Dim(3, name="in"), dt.Dim(4, name="out")


class _Net(drf.Module):
    def __init__(self, i, o):
        super().__init__()
        self.lin = drf.Linear(i, o)
        self.scale = drf.Parameter([o])
        self.scale.initial = 2.0
        self.count = drf.Parameter((), dtype="int32", auxiliary=True)

    def __call__(self, x):
        self.count.assign_add(1)
        return self.lin(x) * self.scale


def test_module_call_forward_and_torch_integration():
    b, i, o = _dims()
    net = _Net(i, o)
    x = dt.Tensor(torch.randn(2, 3), (b, i))
    y = net(x)
    assert y.dims == (b, o)
    torch.testing.assert_close(net.forward(x).raw, y.raw)  # forward is the rf-style __call__
    assert isinstance(net, torch.nn.Module) and isinstance(net.lin.weight, drf.Parameter)
    assert isinstance(net.lin.weight, dt.Tensor) and net.lin.weight is net.lin.weight  # the same object each read
    assert sorted(net.state_dict()) == ["count", "lin.bias", "lin.weight", "scale"]
    assert [n for n, _ in net.named_parameters()] == ["scale", "lin.weight", "lin.bias"]  # count: a buffer
    assert [n for n, _ in net.named_buffers()] == ["count"] and int(net.count.raw) == 2
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net(x).raw.sum().backward()
    before = net.lin.weight.raw.detach().clone()
    opt.step()
    assert not torch.equal(before, net.lin.weight.raw)  # the rf.Parameter reads the updated torch parameter
    net.to(torch.float64)
    assert net.lin.weight.dtype == "float64" and net.count.auxiliary  # attributes survive .to()
    assert [m for m in net.modules(recurse=False, include_self=False)] == [net.lin]
    assert net.get_default_name() == "net"
    assert net.get_deep("lin.weight") is net.lin.weight


def test_parameter_api():
    _, i, o = _dims()
    p = drf.Parameter((i, o), weight_decay=0.01)
    assert p.raw.shape == (3, 4) and not p.raw.any() and p.raw.requires_grad and p.weight_decay == 0.01
    p.initial = drf.init.Glorot()
    assert p.raw.abs().max() <= (6 / 7) ** 0.5 and isinstance(p.initial, drf.init.Glorot)
    p.initial = dt.Tensor(torch.ones(4, 3), (o, i))  # a Tensor over the dims in another order
    assert torch.equal(p.raw, torch.ones(3, 4))
    p.assign(2.0)
    p.assign_add(dt.Tensor(torch.arange(4.0), (o,)))  # broadcast over the missing dim
    assert p.raw[0].tolist() == [2.0, 3.0, 4.0, 5.0]
    p.weight_decay = 1e-4
    assert p.raw.weight_decay == 1e-4  # on the torch parameter: what an optimizer's groups read
    p.trainable = False
    assert not p.raw.requires_grad and p.trainable is False
    q = drf.Parameter([i], dtype="int32")
    assert not q.raw.requires_grad and q.trainable is None
    aux = drf.Parameter([i], auxiliary=True)
    assert not aux.raw.requires_grad
    t = drf.Parameter(dt.Tensor(torch.full((3,), 5.0), (i,)))  # a Tensor as the initial value
    assert t.raw.tolist() == [5.0] * 3
    old = t.raw
    t.raw_tensor = torch.zeros(3)
    assert t.raw is old and not t.raw.any()  # the same torch Parameter, new data
    with pytest.raises(ValueError, match="twice"):
        drf.Parameter((i, i))
    with pytest.raises(ValueError, match="static"):
        drf.Parameter((dt.Dim(None, name="x"),))


def test_demo_style_weight_decay_and_param_groups():
    """RETURNN code sets `p.weight_decay` on model.parameters(); the runner's optimizer groups follow it."""
    from dimtorch.rf.runner import param_groups
    _, i, o = _dims()
    net = _Net(i, o)
    for p in net.parameters():
        p.weight_decay = 1e-4
    net.lin.bias.weight_decay = 0.0
    groups = {g["weight_decay"]: len(g["params"]) for g in param_groups(net)}
    assert groups == {1e-4: 2, 0.0: 1}
    groups = {g["weight_decay"]: len(g["params"]) for g in param_groups(net, weight_decay=0.5)}
    assert groups == {0.5: 2, 0.0: 1}  # a global weight decay: all but biases (RETURNN's engine's rule)


def test_deep_copy_reinitializes_or_shares():
    _, i, o = _dims()
    net = _Net(i, o)
    net.lin.weight.weight_decay = 0.3
    c = copy.deepcopy(net)
    assert not torch.equal(c.lin.weight.raw, net.lin.weight.raw)  # Glorot drawn again (RETURNN's copy_init)
    assert torch.equal(c.scale.raw, net.scale.raw)  # a value as initial: the same value
    assert c.lin.weight.weight_decay == 0.3 and c.count.auxiliary and c.lin.in_dim is i
    with drf.set_parameter_copy_behavior_ctx("share"):
        s = copy.deepcopy(net)
    assert s.lin.weight.raw is net.lin.weight.raw


def test_dt_nn_parameters_become_rf_parameters():
    _, i, o = _dims()
    z = drf.ZoneoutLSTM(i, o)  # built on dimtorch.nn's ZoneoutLSTM
    assert isinstance(z.ff_weight, drf.Parameter) and tuple(z.ff_weight.raw.shape) == (16, 3)
    assert isinstance(z.ff_weight.initial, drf.init.Glorot)


def test_hooks():
    b, i, o = _dims()
    lin = drf.Linear(i, o)
    x = dt.Tensor(torch.randn(2, 3), (b, i))
    seen = []
    h1 = lin.register_forward_hook(lambda m, args, kwargs, result: seen.append((m, args[0])) or None)
    h2 = drf.hooks.setup_post_hook_on_method(lin, "__call__", lambda m, a, k, r: r * 0.0, prepend=False)
    y = lin(x)
    assert seen and seen[0][0] is lin and seen[0][1] is x and not y.raw.any()
    h2.remove()
    assert lin(x).raw.any()
    h1.remove()
    assert type(lin) is drf.Linear
    calls = []
    hm = drf.hooks.setup_post_hook_on_method(lin, "extra_repr", lambda m, a, k, r: calls.append(r) or r + "!")
    assert lin.extra_repr().endswith("!") and calls
    hm.remove()
    assert not lin.extra_repr().endswith("!")


def test_parametrization():
    """RETURNN's test_parametrization program: a parametrized weight reads as a plain Tensor in training, as the
    Parameter itself in eval; the parameter stays registered."""
    from functools import partial
    _, i, o = _dims()
    mod = drf.Linear(i, o)
    orig = mod.weight
    drf.register_parametrization(mod, "weight", partial(lambda p, drop_prob: dt.dropout(p, drop_prob), drop_prob=0.5))
    assert drf.is_parametrized(mod) and drf.is_parametrized(mod, "weight")
    assert mod.weight is not orig and not isinstance(mod.weight, drf.Parameter)
    assert dict(mod.named_parameters())["weight"] is orig.raw  # (RETURNN: the rf.Parameter itself)
    drf.remove_parametrization(mod, "weight")
    assert mod.weight is orig and not drf.is_parametrized(mod)
    drf.weight_noise(mod, "weight", std=0.1)
    drf.init_train_step_run_ctx(train_flag=True)
    assert not isinstance(mod.weight, drf.Parameter)
    drf.init_train_step_run_ctx(train_flag=False)
    assert mod.weight is orig
    drf.weight_dropout(mod, "bias", drop_prob=0.5)
    assert mod.bias is mod._dt_member("bias")


def test_build_from_dict():
    _, i, o = _dims()
    d = build_dict(drf.LayerNorm, eps=1e-3)
    assert d == {"class": "rf.LayerNorm", "eps": 1e-3}
    ln = build_from_dict(d, i)
    assert isinstance(ln, drf.LayerNorm) and ln.eps == 1e-3
    ln = build_from_dict({"class": "returnn.frontend.normalization.LayerNorm"}, i)  # a RETURNN path
    assert isinstance(ln, drf.LayerNorm)
    layer = build_from_dict({"class": "returnn.frontend.encoder.conformer.ConformerEncoderLayer", "num_heads": 1},
                            out_dim=dt.Dim(4, name="m"), ff_dim=dt.Dim(8, name="ff"))
    from dimtorch.rf.encoder.conformer import ConformerEncoderLayer
    assert isinstance(layer, ConformerEncoderLayer)
    f = build_from_dict({"class": "dimtorch.relu"})
    assert f is dt.relu
    with pytest.raises(ValueError, match="class"):
        build_from_dict({"eps": 1.0})


def test_returnn_checkpoint_roundtrip(tmp_path, rf):
    """A RETURNN model's checkpoint (its torch wrapper's state dict, RETURNN's file format) loads into ours, and
    ours saves one RETURNN loads."""
    from returnn.tensor import Dim as RfDim
    from returnn.torch.frontend.bridge import rf_module_to_pt_module
    ri, ro = RfDim(3, name="in"), RfDim(4, name="out")

    class Theirs(rf.Module):
        def __init__(self):
            super().__init__()
            self.lin = rf.Linear(ri, ro)
            self.norm = rf.BatchNorm(ro)
            self.lstm = rf.LSTM(ro, ro)

    class Ours(drf.Module):
        def __init__(self, i, o):
            super().__init__()
            self.lin = drf.Linear(i, o)
            self.norm = drf.BatchNorm(o)
            self.lstm = drf.LSTM(o, o)

    theirs = Theirs()
    pt = rf_module_to_pt_module(theirs)
    with torch.no_grad():
        for t in pt.state_dict().values():
            t.uniform_(0.5, 1.0)
    path = tmp_path / "epoch.001.pt"
    torch.save({"model": pt.state_dict(), "epoch": 1, "step": 10, "effective_learning_rate": 1e-3,
                "returnn_version": "x"}, path)
    _, i, o = _dims()
    ours = Ours(i, o)
    extra = drf.load_returnn_checkpoint(path, ours)
    assert extra["step"] == 10
    for k, v in pt.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[k], v)
    with torch.no_grad():
        ours.lin.weight.raw.fill_(0.25)
    drf.save_returnn_checkpoint(tmp_path / "ours.pt", ours, epoch=2, step=20)
    saved = torch.load(tmp_path / "ours.pt", weights_only=True)
    pt.load_state_dict(saved["model"])
    assert torch.all(theirs.lin.weight.raw_tensor == 0.25) and saved["step"] == 20
    bad = dict(pt.state_dict())
    bad["lin.weight"] = bad["lin.weight"].t()
    with pytest.raises(drf.checkpoint.CheckpointError, match="lin.weight"):
        drf.load_returnn_checkpoint({"model": bad}, ours)


def test_rf_checkpoint_functions(tmp_path):
    """RETURNN frontend's rf.checkpoint: .npz by parameter name, and a torch checkpoint read as numpy."""
    from dimtorch.rf import checkpoint
    _, i, o = _dims()
    net = _Net(i, o)
    values = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    checkpoint.save_params(values, tmp_path / "p.npz", step=3, epoch=2)
    loaded = checkpoint.load_params(tmp_path / "p.npz")
    assert sorted(loaded) == sorted(values)
    assert checkpoint.check_params_complete(net, loaded) == ["scale", "lin.weight", "lin.bias", "count"]
    del loaded["scale"]
    with pytest.raises(ValueError, match="lacks"):
        checkpoint.check_params_complete(net, loaded)
    assert "scale" not in checkpoint.check_params_complete(net, loaded, allow_missing=True)
    drf.save_returnn_checkpoint(tmp_path / "m.pt", net)
    assert sorted(checkpoint.load_torch_checkpoint(tmp_path / "m.pt")) == sorted(values)


def test_compiles_to_one_graph():
    """torch.compile(fullgraph=True) of rf modules: while a graph is traced, parameters read as plain Tensors."""
    batch, i = dt.Dim(None, name="batch"), dt.Dim(4, name="in")
    time = dt.Dim(dt.Tensor(torch.tensor([3, 2]), (batch,)), name="time")
    lin, norm = drf.Linear(i, i), drf.LayerNorm(i)
    att = drf.SelfAttention(i, i, key_dim_total=i, value_dim_total=i, num_heads=2, att_dropout=0.0)

    def step(x):
        return norm(att(lin(x), axis=time)).raw

    x = dt.Tensor(torch.randn(2, 3, 4), (batch, time, i))
    torch.testing.assert_close(torch.compile(step, fullgraph=True)(x), step(x), atol=1e-5, rtol=1e-4)
    assert isinstance(lin.weight, drf.Parameter)  # eagerly again the Parameter
