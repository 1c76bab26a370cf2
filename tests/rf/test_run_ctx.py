"""dimtorch.rf's run context: losses (summed, mean, inv_norm_factor, total_loss with scale, as_error,
use_normalized_loss, custom_inv_norm_factor) computed as RETURNN's PyTorch engine does, by running the same
programs on both (as RETURNN's own test_loss_normalized / test_loss_normalization compare); outputs with
mark_as_output / mark_as_default_output; the train flag of modules; errors naming the call."""
import pytest
import torch

import dimtorch as dt
import dimtorch.rf as drf

LENGTHS = (5, 3, 1)


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    raw = torch.randn(3, 5, 4, generator=g)
    for b, n in enumerate(LENGTHS):
        raw[b, n:] = 100.0  # padding: must never count
    return raw


def _ours(raw):
    from dimtorch.rf._dims import batch_dim as batch  # the global batch dim (its size from data here)
    time = dt.Dim(dt.Tensor(torch.tensor(LENGTHS), (batch,)), name="time")
    feat = dt.Dim(4, name="feat")
    return dt.Tensor(raw.clone().requires_grad_(), (batch, time, feat)), batch, time, feat


def _theirs(rf, raw):
    from returnn.tensor import Dim
    batch = Dim(3, name="batch")
    time = Dim(rf.convert_to_tensor(torch.tensor(LENGTHS, dtype=torch.int32), dims=[batch]), name="time")
    feat = Dim(4, name="feat")
    return rf.convert_to_tensor(raw.clone().requires_grad_(), dims=[batch, time, feat]), batch, time, feat


PROGRAMS = {
    "summed": lambda F, x, b, t, f: [(F.reduce_sum(x, axis=f), "loss", {})],
    "normalized": lambda F, x, b, t, f: [(F.reduce_sum(x, axis=f), "loss", dict(use_normalized_loss=True))],
    "custom_norm": lambda F, x, b, t, f: [(F.reduce_sum(x, axis=f), "loss", dict(
        custom_inv_norm_factor=_lengths(F, t)))],
    "custom_norm_normalized": lambda F, x, b, t, f: [(F.reduce_sum(x, axis=f), "loss", dict(
        custom_inv_norm_factor=_lengths(F, t), use_normalized_loss=True))],
    "per_seq": lambda F, x, b, t, f: [(F.reduce_sum(x, axis=[t, f]), "loss", dict(use_normalized_loss=True))],
    "scalar": lambda F, x, b, t, f: [(F.reduce_sum(x, axis=[b, t, f]), "loss", {})],
    "several": lambda F, x, b, t, f: [(F.reduce_sum(x, axis=f), "a", dict(scale=0.5)),
                                      (F.reduce_mean(x, axis=f), "b", dict(use_normalized_loss=True, scale=2.0)),
                                      (F.reduce_max(x, axis=f), "err", dict(as_error=True)),
                                      (F.reduce_min(x, axis=f), "off", dict(scale=0.0))],
    "int_error": lambda F, x, b, t, f: [(F.reduce_sum(x, axis=f), "ce", {}),
                                        (F.cast(F.reduce_argmax(x, axis=f), "int32"), "fer", dict(as_error=True))],
}


def _lengths(F, t):
    return t.dyn_size_ext if hasattr(t, "dyn_size_ext") and not isinstance(t, dt.Dim) else t.lengths


def _run(F, ctx_mod, x, dims, program):
    ctx_mod.init_train_step_run_ctx(train_flag=True)
    for loss, name, opts in program(F, x, *dims):
        ctx_mod.get_run_ctx().mark_as_loss(loss, name, **opts)
    ctx = ctx_mod.get_run_ctx()
    total = ctx.total_loss()
    out = {"total_loss": float(total.raw_tensor if hasattr(total, "raw_tensor") and not isinstance(total, dt.Tensor)
                               else total.raw)}
    for name, loss in ctx.losses.items():
        for key, value in (("summed", loss.get_summed_loss()), ("mean", loss.get_mean_loss()),
                           ("inv_norm_factor", loss.get_inv_norm_factor())):
            if isinstance(value, dt.Tensor):
                value = value.raw
            elif hasattr(value, "raw_tensor"):
                value = value.raw_tensor
            out[f"{name}:{key}"] = float(value)
    return out, total


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_losses_as_returnn(rf, name):
    raw = _data()
    rx, *rdims = _theirs(rf, raw)
    x, *dims = _ours(raw)
    r_out, r_total = _run(rf, rf, rx, rdims, PROGRAMS[name])
    d_out, d_total = _run(dt, drf, x, dims, PROGRAMS[name])
    drf.reset_run_ctx()
    assert r_out.keys() == d_out.keys()
    for key in r_out:
        assert d_out[key] == pytest.approx(r_out[key], rel=1e-5, abs=1e-5), key
    # the gradient of the total loss too
    r_total.raw_tensor.backward()
    d_total.raw.backward()
    torch.testing.assert_close(x.raw.grad, rx.raw_tensor.grad)


def test_total_loss_without_counting_losses_is_zero():
    x, b, t, f = _ours(_data())
    drf.init_train_step_run_ctx()
    drf.get_run_ctx().mark_as_loss(dt.reduce_sum(x, axis=f), "err", as_error=True)
    assert drf.get_run_ctx().total_loss() == 0.0
    drf.reset_run_ctx()


def test_outputs_and_stages():
    x, b, t, f = _ours(_data())
    drf.init_forward_step_run_ctx(epoch=3, step=7)
    ctx = drf.get_run_ctx()
    assert (ctx.stage, ctx.train_flag, ctx.epoch, ctx.step) == ("forward_step", False, 3, 7)
    ctx.mark_as_output(x, "x", shape=(f, b, t))
    ctx.mark_as_default_output(dt.reduce_sum(x, axis=f))
    out = ctx.outputs["x"]
    assert out.dims == (f, b, t) and out.name == "x"
    torch.testing.assert_close(out.raw, x.raw.permute(2, 0, 1))
    assert ctx.outputs["output"].dims == (b, t)
    with pytest.raises(ValueError, match="already marked"):
        ctx.mark_as_output(x, "x")
    with pytest.raises(RuntimeError, match="mark_as_loss.*train step"):
        ctx.mark_as_loss(x, "l")
    drf.init_train_step_run_ctx(train_flag=False, step=2, epoch=1)
    ctx = drf.get_run_ctx()
    assert (ctx.stage, ctx.train_flag) == ("train_step", False)
    with pytest.raises(RuntimeError, match="mark_as_output.*forward step"):
        ctx.mark_as_output(x, "x")
    with pytest.raises(RuntimeError, match="total_loss.*no loss"):
        ctx.total_loss()
    drf.reset_run_ctx()
    assert drf.get_run_ctx().stage == "init" and drf.get_run_ctx().train_flag is False


def test_module_train_flag_follows_the_run_context():
    """Within a step, modules train as the context says (RETURNN's rule); train_flag_ctx per class; outside a
    step, torch's train()/eval()."""
    lin = drf.Linear(dt.Dim(3, name="i"), dt.Dim(2, name="o"))
    bn = drf.BatchNorm(dt.Dim(3, name="c"))
    assert lin.training
    lin.eval()
    assert not lin.training
    drf.init_train_step_run_ctx(train_flag=True)
    assert lin.training and bn.training
    with drf.get_run_ctx().train_flag_ctx(False, func=drf.BatchNorm.__call__):
        assert lin.training and not bn.training
    drf.init_forward_step_run_ctx()
    assert not lin.training
    drf.reset_run_ctx()
    assert not lin.training  # its own flag again
    lin.train()
    assert lin.training


def test_core_slot_is_installed():
    from dimtorch._core import run_ctx as slot
    drf.init_train_step_run_ctx()
    assert slot.current("test") is drf.get_run_ctx()
    drf.reset_run_ctx()
    with pytest.raises(RuntimeError, match="test: no run context"):
        slot.current("test")


def test_step_reached_is_recorded_per_schedule_at_install():
    """What SpecAugment reads: the phase of its schedule (recorded when the context is installed, so a compiled
    step guards on the phase, not on the step number); a schedule first seen is answered from the step."""
    from dimtorch._core import run_ctx as slot
    from dimtorch.rf.audio.specaugment import _phase_step

    for step, want in ((0, (True, False, False)), (999, (True, False, False)), (1000, (True, True, False)),
                       (2500, (True, True, True))):
        drf.init_train_step_run_ctx(train_flag=True, step=step)
        assert slot.step_reached((0, 1000, 2000)) == want
        assert ((0, 1000, 2000), want) in slot._reached
        assert _phase_step((0, 1000, 2000)) == max(t for t, r in zip((0, 1000, 2000), want) if r)
    drf.init_train_step_run_ctx(train_flag=True, step=7)
    assert slot.step_reached((5, 10, 20)) == (True, False, False) and _phase_step((5, 10, 20)) == 5
    drf.reset_run_ctx()
