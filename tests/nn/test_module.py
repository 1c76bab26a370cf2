"""Tests of dt.nn.Module/Parameter/Buffer: torch integration (parameters, optimizers, state_dict, .to, autocast, checkpoint, functional_call), assignment rules, state-dict checks."""
import copy

import pytest
import torch
import torch.utils.checkpoint

import dimtorch as dt


def _dims():
    return dt.Dim(None, name="batch"), dt.Dim(3, name="in"), dt.Dim(4, name="out")


class Affine(dt.nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.w = dt.nn.Parameter((out_dim, in_dim), init=dt.nn.init.Glorot())
        self.b = dt.nn.Parameter((out_dim,), init=0.5)
        self.count = dt.nn.Buffer((out_dim,), "int64", init=0)
        self.scratch = dt.nn.Buffer((out_dim,), init=1.0, persistent=False)

    def forward(self, x):
        return dt.matmul(x, self.w, reduce=self.in_dim) + self.b


def test_parameters_registered_and_read_as_tensors():
    batch, i, o = _dims()
    m = Affine(i, o)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["w", "b"]
    assert list(m.state_dict()) == ["w", "b", "count"]  # the non-persistent buffer is not saved
    w = m.w
    assert isinstance(w, dt.Tensor) and w.dims == (o, i)
    assert w.raw is m._parameters["w"] and isinstance(w.raw, torch.nn.Parameter)
    assert m.w is w  # cached while the parameter is the same object
    assert m.count.dtype == "int64" and not m.count.raw.requires_grad
    assert torch.equal(m.b.raw, torch.full((4,), 0.5))
    assert dict(m.named_parameter_dims()) == {"w": (o, i), "b": (o,), "count": (o,), "scratch": (o,)}


def test_optimizer_step_changes_parameters_and_views_follow():
    batch, i, o = _dims()
    m = Affine(i, o)
    before = m.w.raw.detach().clone()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = dt.Tensor(torch.randn(2, 3), (batch, i))
    loss = dt.reduce_sum(m(x) ** 2, axis=(batch, o))
    loss.raw.backward()
    assert m.w.raw.grad is not None and m.b.raw.grad is not None
    opt.step()
    assert not torch.equal(m.w.raw, before)
    assert torch.equal(m.w.raw, m._parameters["w"])


def test_state_dict_roundtrip():
    batch, i, o = _dims()
    a, b = Affine(i, o), Affine(i, o)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.w.raw, b.w.raw) and torch.equal(a.b.raw, b.b.raw)
    assert b.w.dims == (o, i)


def test_load_state_dict_lists_every_mismatch_and_loads_nothing():
    batch, i, o = _dims()
    m = Affine(i, o)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    bad = {"w": torch.zeros(5, 3), "b": torch.zeros(4), "extra": torch.zeros(2)}
    with pytest.raises(dt.nn.StateDictError) as e:
        m.load_state_dict(bad)
    msg = str(e.value)
    assert msg.startswith("Affine.load_state_dict():")
    assert "3 problems" in msg and "nothing was loaded" in msg
    assert "missing: count ('out'(4))" in msg
    assert "unexpected: extra (shape (2,))" in msg
    assert "shape: w is ('out'(4), 'in'(3)) = (4, 3) in the module, (5, 3) in the state dict" in msg
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} was changed"
    # strict=False: only shapes are checked
    m.load_state_dict({"b": torch.ones(4)}, strict=False)
    assert torch.equal(m.b.raw, torch.ones(4))


def test_load_state_dict_from_another_model():
    batch, i, o = _dims()
    m = Affine(i, o)
    other = dt.nn.Linear(i, o)
    with pytest.raises(dt.nn.StateDictError, match="missing: w .*\n.*missing: b .*\n.*missing: count"):
        m.load_state_dict(other.state_dict())


def test_to_float64_and_views_reflect_it():
    batch, i, o = _dims()
    m = Affine(i, o)
    assert m.w.dtype == "float32"
    m.to(torch.float64)
    assert m.w.dtype == "float64" and m.w.raw.dtype == torch.float64 and m.count.dtype == "int64"
    x = dt.Tensor(torch.randn(2, 3, dtype=torch.float64), (batch, i))
    assert m(x).dtype == "float64"


def test_load_state_dict_is_reflected_in_views():
    batch, i, o = _dims()
    m = Affine(i, o)
    sd = {k: torch.ones_like(v) for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    assert torch.equal(m.w.raw, torch.ones(4, 3))


def test_autocast_bf16_cpu_linear():
    batch, i, o = _dims()
    lin = dt.nn.Linear(i, o)
    x = dt.Tensor(torch.randn(2, 3), (batch, i))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = lin(x)
    assert y.dtype == "bfloat16" and y.raw.dtype == torch.bfloat16
    ref = torch.nn.functional.linear(x.raw, lin.weight.raw, lin.bias.raw)
    torch.testing.assert_close(y.raw.float(), ref, rtol=2e-2, atol=2e-2)
    y.raw.float().sum().backward()
    assert lin.weight.raw.grad.dtype == torch.float32


def test_torch_utils_checkpoint_through_module():
    batch, i, o = _dims()
    m = dt.nn.Sequential(dt.nn.Linear(i, o), dt.nn.LayerNorm(o))
    x_raw = torch.randn(2, 3)

    def run(use_checkpoint):
        m.zero_grad()
        x = dt.Tensor(x_raw, (batch, i))
        if use_checkpoint:
            y_raw = torch.utils.checkpoint.checkpoint(lambda r: m(dt.Tensor(r, (batch, i))).raw, x.raw,
                                                      use_reentrant=False)
        else:
            y_raw = m(x).raw
        (y_raw ** 2).sum().backward()
        return y_raw.detach(), [p.grad.clone() for p in m.parameters()]

    y1, g1 = run(False)
    y2, g2 = run(True)
    torch.testing.assert_close(y1, y2)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)


def test_functional_call_uses_given_parameters():
    batch, i, o = _dims()
    m = Affine(i, o)
    x = dt.Tensor(torch.randn(2, 3), (batch, i))
    params = {"w": torch.zeros(4, 3), "b": torch.ones(4)}
    y = torch.func.functional_call(m, params, (x,))
    assert torch.equal(y.raw, torch.ones(2, 4))
    assert not torch.equal(m(x).raw, torch.ones(2, 4))  # the module's own parameters are back


def test_assignment_rules():
    batch, i, o = _dims()
    m = Affine(i, o)
    # copy-assign a dimtorch Tensor with the same dims (any order)
    m.w = dt.Tensor(torch.ones(3, 4), (i, o))
    assert torch.equal(m.w.raw, torch.ones(4, 3)) and isinstance(m.w.raw, torch.nn.Parameter)
    with pytest.raises(ValueError, match=r"Affine.w = ...: 'w' has dims \('out'\(4\), 'in'\(3\)\), "
                                         r"the assigned value \('out'\(4\)\)"):
        m.w = dt.Tensor(torch.ones(4), (o,))
    with pytest.raises(ValueError, match=r"Affine.w = ...: 'w' has dims .* shape \(4, 3\), "
                                         r"the assigned torch tensor has shape \(3, 4\)"):
        m.w = torch.nn.Parameter(torch.zeros(3, 4))
    # tie: a Tensor whose raw is a Parameter
    other = Affine(i, o)
    m.w = other.w
    assert m.w.raw is other.w.raw
    assert len(list(m.parameters())) == 2
    # redefine with a new Parameter; delete; None
    m.w = dt.nn.Parameter((i,))
    assert m.w.dims == (i,)
    del m.w
    assert "w" not in dict(m.named_parameters())
    m.b = None
    assert m.b is None


def test_parameter_construction_errors():
    batch, i, o = _dims()
    with pytest.raises(ValueError, match=r"dimtorch.nn.Parameter\(\): dim .*batch.* has no static size"):
        dt.nn.Parameter((batch, i))
    with pytest.raises(ValueError, match=r"dimtorch.nn.Parameter\(\): dim .* is given twice"):
        dt.nn.Parameter((i, i))
    with pytest.raises(ValueError, match=r"dimtorch.nn.Parameter\(\): init gave shape \(2,\)"):
        dt.nn.Parameter((i,), init=torch.zeros(2))
    with pytest.raises(ValueError, match="unknown dtype"):
        dt.nn.Parameter((i,), "float33")
    p = dt.nn.Parameter((i, o), init=dt.Tensor(torch.arange(12.0).reshape(4, 3), (o, i)))
    assert torch.equal(p.raw, torch.arange(12.0).reshape(4, 3).T)
    assert not dt.nn.Parameter((i,), "int64").raw.requires_grad
    assert "dims=('in'(3), 'out'(4))" in repr(p)


def test_deepcopy_keeps_dims():
    batch, i, o = _dims()
    m = dt.nn.Sequential(dt.nn.Linear(i, o), dt.nn.LayerNorm(o))
    c = copy.deepcopy(m)
    assert c[0].weight.dims[0] is o and c[0].in_dim is i
    assert c[0].weight.raw is not m[0].weight.raw
    x = dt.Tensor(torch.randn(2, 3), (batch, i))
    torch.testing.assert_close(c(x).raw, m(x).raw)


def test_module_list_and_sequential_are_torch_modules():
    batch, i, o = _dims()
    layers = dt.nn.ModuleList([dt.nn.Linear(i, i) for _ in range(2)])
    assert isinstance(layers, torch.nn.ModuleList) and isinstance(layers, dt.nn.Module)
    seq = dt.nn.Sequential(*layers, dt.nn.Linear(i, o))
    assert isinstance(seq, torch.nn.Sequential)
    assert len(list(seq.parameters())) == 6
    x = dt.Tensor(torch.randn(2, 3), (batch, i))
    assert seq(x).dims == (batch, o)
    assert list(seq.state_dict())[:2] == ["0.weight", "0.bias"]


def test_class_level_reader_falls_through_for_other_instances():
    batch, i, o = _dims()

    class Flex(dt.nn.Module):
        def __init__(self, kind):
            super().__init__()
            if kind == "param":
                self.thing = dt.nn.Parameter((i,))
            elif kind == "module":
                self.thing = dt.nn.Linear(i, o)
            elif kind == "plain":
                self.thing = 3

    p, m, plain, none = Flex("param"), Flex("module"), Flex("plain"), Flex(None)
    assert p.thing.dims == (i,)
    assert isinstance(m.thing, dt.nn.Linear)
    assert plain.thing == 3
    assert not hasattr(none, "thing")
    with pytest.raises(AttributeError, match="thing"):
        none.thing
    none.thing = dt.nn.Parameter((o,))  # registering later on another instance
    assert none.thing.dims == (o,)
    del p.thing  # as in torch, a parameter name becomes a submodule after del
    p.thing = dt.nn.Linear(i, o)
    assert isinstance(p.thing, dt.nn.Linear) and "thing" not in dict(p.named_parameters())


def test_submodule_reads_follow_registration_changes():
    batch, i, o = _dims()

    class Holder(dt.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = dt.nn.Linear(i, o)

    h = Holder()
    first = h.inner
    assert isinstance(first, dt.nn.Linear) and h.inner is first
    h.inner = dt.nn.LayerNorm(i)  # replaced in _modules
    assert isinstance(h.inner, dt.nn.LayerNorm)
    del h.inner
    with pytest.raises(AttributeError, match="inner"):
        h.inner
    h.inner = 5  # a plain attribute in the instance dict wins over the class-level reader
    assert h.inner == 5
    assert isinstance(Holder().inner, dt.nn.Linear)


def test_replicas_and_assign_load_see_their_own_parameters():
    batch, i, o = _dims()
    lin = dt.nn.Linear(i, o)
    lin.weight  # cache the view
    replica = copy.copy(lin)  # shares the instance dict's contents, as DataParallel's replicas do
    replica._parameters = dict(replica._parameters)
    replica._parameters["weight"] = torch.nn.Parameter(torch.zeros(4, 3))
    assert torch.equal(replica.weight.raw, torch.zeros(4, 3))
    assert lin.weight.raw is lin._parameters["weight"] and not torch.equal(lin.weight.raw, torch.zeros(4, 3))
    sd = {"weight": torch.ones(4, 3), "bias": torch.ones(4)}
    lin.load_state_dict(sd, assign=True)
    assert torch.equal(lin.weight.raw, torch.ones(4, 3)) and lin.weight.dims == (o, i)


def test_to_float64_for_every_layer():
    batch, i, o = _dims()
    time = dt.Dim(dt.Tensor(torch.tensor([3, 2]), (batch,)), name="time")
    x = dt.Tensor(torch.randn(2, 3, 3, dtype=torch.float64), (batch, time, i))
    for layer in [dt.nn.Linear(i, o), dt.nn.LayerNorm(i), dt.nn.RMSNorm(i), dt.nn.BatchNorm(i),
                  dt.nn.FeedForward(i, o, dropout=0.0)]:
        layer.to(torch.float64)
        assert layer(x).dtype == "float64", type(layer).__name__
    lstm = dt.nn.LSTM(i, o).to(torch.float64)
    y, state = lstm(x, spatial_dim=time)
    assert y.dtype == "float64" and state.h.dtype == "float64"
