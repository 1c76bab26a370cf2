"""RETURNN's rule for operators under dimtorch.rf: `a + b` where neither operand holds all dims broadcasts over
all sources (RETURNN's combine_bc; its beam searches add (beam, batch) scores to (batch, vocab) log probs), as do
combine/compare without allow_broadcast_all_sources; dimtorch's own rule (dimtorch.rf not imported, or
set_operators_broadcast_all_sources(False)) refuses. Against a positional torch computation, forward and backward,
on a padded batch with NaN / huge padding, each sequence alone; the Python definitions (the traced path) alike;
RETURNN's own result where it is installed."""
import operator

import pytest
import torch

import dimtorch as dt
import dimtorch.rf as drf
from definition_checks import check
from helpers import PAD_LARGE, PAD_NAN, make_padded_batch, valid_mask


@pytest.fixture
def rule():
    """The rule as dimtorch.rf sets it (tests/conftest.py sets dimtorch's own rule outside tests/rf)."""
    previous = drf.set_operators_broadcast_all_sources(True)
    yield
    drf.set_operators_broadcast_all_sources(previous)


def _operands(pad):
    """a over (beam, batch, time) (time with lengths, padding `pad`), b over (batch, time, vocab)."""
    pb = make_padded_batch((4, 2, 0), feature=5, pad_value=pad, extra_time=1, dtype=torch.float64, seed=1)
    beam = dt.Dim(3, name="beam")
    g = torch.Generator().manual_seed(2)
    a_raw = torch.randn(3, 3, pb.x.raw.shape[1], dtype=torch.float64, generator=g)
    a_raw[:, ~pb.mask] = pad
    a = dt.Tensor(a_raw.requires_grad_(), (beam, pb.batch, pb.time))
    b = dt.Tensor(pb.x.raw.clone().requires_grad_(), (pb.batch, pb.time, pb.feature))
    return a, b, beam, pb


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("op,torch_op", [(operator.add, torch.add), (operator.sub, torch.sub),
                                         (operator.mul, torch.mul), (operator.truediv, torch.div)])
def test_operators_broadcast_all_sources(rule, pad, op, torch_op):
    a, b, beam, pb = _operands(pad)
    out = op(a, b)
    assert out.dims == (beam, pb.batch, pb.time, pb.feature)  # a's dims, then b's others (RETURNN's order)
    ref = torch_op(a.raw[..., None], b.raw[None])  # positional: (beam, batch, time, vocab)
    mask = valid_mask(out.dims, out.raw.shape)
    torch.testing.assert_close(out.raw[mask], ref[mask])
    cot = torch.randn(out.raw.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    ga, gb = torch.autograd.grad(out.raw, (a.raw, b.raw), cot.where(mask, 0.0))
    ra, rb = torch.autograd.grad(ref, (a.raw, b.raw), cot.where(mask, 0.0))
    ma, mb = valid_mask(a.dims, a.raw.shape), valid_mask(b.dims, b.raw.shape)
    torch.testing.assert_close(ga[ma], ra[ma])
    torch.testing.assert_close(gb[mb], rb[mb])
    for i, n in enumerate(pb.lengths):  # each sequence alone
        t = dt.Dim(n, name="t")
        alone = op(dt.Tensor(a.raw[:, i, :n].detach(), (beam, t)), dt.Tensor(b.raw[i, :n].detach(), (t, pb.feature)))
        torch.testing.assert_close(alone.raw, out.raw[:, i, :n].detach())


def test_comparison_combine_compare_and_definitions(rule):
    a, b, beam, pb = _operands(0.0)
    lt = a < b
    assert lt.dims == (beam, pb.batch, pb.time, pb.feature)
    torch.testing.assert_close(lt.raw, a.raw[..., None] < b.raw[None])
    # RETURNN frontend's order, no allow_broadcast_all_sources: the rule; the fast paths equal the definitions
    # (eager and traced), forward and backward
    out = check(dt.combine, a, b, "add")
    torch.testing.assert_close(out.raw, (a.raw[..., None] + b.raw[None]).detach())
    check(dt.compare, a, b, "less")
    torch.testing.assert_close(drf.combine(a, "+", b).raw, out.raw)
    with pytest.raises(ValueError, match="no operand has all dims"):
        dt.combine(a, b, "add", allow_broadcast_all_sources=False)  # refused where the call says so


def test_namesakes_stay_an_error(rule):
    """Two different Dims of one name: a product of the two axes is never what such code means."""
    x = dt.Tensor(torch.zeros(2, 3), (dt.Dim(2, name="a"), dt.Dim(3, name="v")))
    y = dt.Tensor(torch.zeros(3, 4), (dt.Dim(3, name="v"), dt.Dim(4, name="c")))
    with pytest.raises(ValueError, match="different Dim objects with the same name"):
        x + y


def test_dimtorch_rule_refuses():
    previous = drf.set_operators_broadcast_all_sources(False)
    try:
        a, b, _, _ = _operands(0.0)
        with pytest.raises(ValueError, match=r"__add__\(\): no operand has all dims"):
            a + b
        with pytest.raises(ValueError, match="no operand has all dims"):
            dt.combine(a, b, "add")
        assert drf.set_operators_broadcast_all_sources(True) is False
        assert (a + b).dims[-1] is b.dims[-1]
    finally:
        drf.set_operators_broadcast_all_sources(previous)


def test_returnn_same(rf, rule):
    from returnn.tensor import Dim as RfDim
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(2, 3, generator=g), torch.randn(3, 4, generator=g)
    ra, rb, rc = RfDim(2, name="beam"), RfDim(3, name="batch"), RfDim(4, name="vocab")
    a, b, c = dt.Dim(2, name="beam"), dt.Dim(3, name="batch"), dt.Dim(4, name="vocab")
    theirs = rf.convert_to_tensor(x.clone(), dims=[ra, rb]) + rf.convert_to_tensor(y.clone(), dims=[rb, rc])
    ours = dt.Tensor(x.clone(), (a, b)) + dt.Tensor(y.clone(), (b, c))
    assert [d.name for d in ours.dims] == [d.name for d in theirs.dims]
    torch.testing.assert_close(ours.raw, theirs.raw_tensor)


def test_under_torch_compile(rule):
    """The traced path (the Python definitions) follows the same rule, in one graph."""
    a, b, beam, pb = _operands(0.0)
    a, b = dt.Tensor(a.raw.detach(), a.dims), dt.Tensor(b.raw.detach(), b.dims)
    torch._dynamo.reset()
    out = torch.compile(lambda x, y: x + y, fullgraph=True, backend="eager")(a, b)
    assert out.dims == (beam, pb.batch, pb.time, pb.feature)
    mask = valid_mask(out.dims, out.raw.shape)
    torch.testing.assert_close(out.raw[mask], (a.raw[..., None] + b.raw[None])[mask])
