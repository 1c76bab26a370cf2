"""dimtorch.rf.bridge (RETURNN's returnn.torch.frontend.bridge): an rf module is its own torch module; a
plain torch module becomes an rf module by a wrapper with its parameters under the same names. And
rf.Parameter (so every rf module's parameters) made on rf's default device, as RETURNN's are (RETURNN's
test_e_branchformer_meta_dev_num_params counts a large model's parameters on the meta device)."""
import pytest
import torch

import dimtorch as dt
import dimtorch.rf as drf
from dimtorch.rf.bridge import (PTModuleAsRFModule, pt_module_to_rf_module, rf_module_to_pt_module,
                                wrapped_pt_module_to_rf_module)


def _net():
    i, o = dt.Dim(3, name="in"), dt.Dim(4, name="out")
    net = drf.Sequential(drf.Linear(i, o), drf.BatchNorm(o, use_mask=False))
    return net, i, o


def test_rf_module_to_pt_module_is_the_module():
    net, i, o = _net()
    pt = rf_module_to_pt_module(net)
    assert pt is net
    assert wrapped_pt_module_to_rf_module(pt) is net
    assert pt_module_to_rf_module(pt) is net
    names = set(pt.state_dict())
    assert {"0.weight", "0.bias", "1.running_mean", "1.running_variance"} <= names
    # auxiliary parameters are buffers (RETURNN's default aux_params_as_buffers=True)
    assert "1.running_mean" not in dict(pt.named_parameters())
    with pytest.raises(NotImplementedError, match="aux_params_as_buffers"):
        rf_module_to_pt_module(net, aux_params_as_buffers=False)
    with pytest.raises(TypeError, match="rf_module_to_pt_module"):
        rf_module_to_pt_module(torch.nn.Linear(2, 2))


def test_pt_module_to_rf_module_wraps_with_same_names_and_values():
    torch.manual_seed(0)
    pt = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    pt[0].bias.requires_grad_(False)
    rf_mod = pt_module_to_rf_module(pt)
    assert isinstance(rf_mod, PTModuleAsRFModule) and isinstance(rf_mod, drf.Module)
    assert rf_module_to_pt_module(rf_mod) is pt
    assert wrapped_pt_module_to_rf_module(pt) is None
    assert set(rf_mod.state_dict()) == set(pt.state_dict())
    for k, v in pt.state_dict().items():
        assert rf_mod.state_dict()[k].data_ptr() == v.data_ptr()  # the same storage: nothing copied
    w = rf_mod._modules["0"].weight
    assert isinstance(w, drf.Parameter) and w.raw is pt[0].weight
    assert not pt[0].bias.requires_grad  # (wrapping keeps a frozen parameter frozen)
    x = torch.randn(5, 3)
    pt.eval()
    torch.testing.assert_close(rf_mod(x), pt(x))  # calling it calls the torch module
    # an optimizer over the wrapper's parameters trains the torch module's
    opt = torch.optim.SGD(rf_mod.parameters(), lr=0.1)
    before = pt[0].weight.detach().clone()
    rf_mod(x).sum().backward()
    opt.step()
    assert not torch.equal(before, pt[0].weight.detach())


def test_parameters_on_the_default_device():
    i, o = dt.Dim(3, name="in"), dt.Dim(4, name="out")
    with drf.set_default_device_ctx("meta"):
        lin = drf.Linear(i, o)
        p = drf.Parameter([o])
    assert all(q.device.type == "meta" for q in lin.parameters())
    assert p.raw.device.type == "meta"
    assert drf.Parameter([o]).raw.device.type == "cpu"
    assert drf.Parameter([o], device="meta").raw.device.type == "meta"


def test_meta_model_matches_returnn_parameter_count(rf):
    """A Conformer built on the meta device: the same parameter count as RETURNN's (and no memory)."""
    from returnn.torch.frontend.bridge import rf_module_to_pt_module as rf_to_pt_returnn
    import returnn.frontend.encoder.conformer as rc
    from returnn.tensor import Dim as RDim
    import dimtorch.rf.encoder.conformer as dc

    def build(rf_, mod, dim_cls):
        with rf_.set_default_device_ctx("meta"):
            return mod.ConformerEncoder(in_dim=dim_cls(8, name="in"), input_layer=None, num_layers=2,
                                        out_dim=dim_cls(16, name="model"), num_heads=2)

    ours = rf_module_to_pt_module(build(drf, dc, dt.Dim))
    theirs = rf_to_pt_returnn(build(rf, rc, RDim))
    assert all(q.device.type == "meta" for q in ours.parameters())
    assert sorted((k, tuple(v.shape)) for k, v in ours.state_dict().items()) == \
        sorted((k, tuple(v.shape)) for k, v in theirs.state_dict().items())
