"""Shared helpers of tests/rf/test_modules*.py: one dimtorch.rf module and its RETURNN frontend twin, the same
parameters (RETURNN's state dict loaded into ours by dimtorch.rf.load_returnn_checkpoint: the names and layouts
must be RETURNN's), the same padded data, outputs and gradients compared on valid frames; plus each sequence
alone through ours.

Our side gets huge (1e30) or NaN padding (NaN where the module promises that padding reaches nothing:
attention, convolutions, recurrences, the encoders; a per-frame module's weight gradient sums padding frames
times their zero gradient, NaN for NaN, as torch's own layers); RETURNN's gets finite padding. RETURNN runs its PyTorch backend at its newest behaviour version (rf_parity.setup_rf);
tests skip without returnn.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

import dimtorch as dt
import dimtorch.rf as drf

LENGTHS = (6, 4, 1)
THEIR_PAD = 0.5  # finite: RETURNN's side must not see NaN (its results on valid frames must not depend on it)


class Data:
    """Padded data (batch, time, feature) for both sides: raw (ours with NaN padding), lengths, and each
    side's dims and Tensor."""

    def __init__(self, rf, feature: int = 8, lengths: Sequence[int] = LENGTHS, seed: int = 0,
                 pad: float = 1e30, sparse: Optional[int] = None):
        from returnn.tensor import Dim as RfDim
        g = torch.Generator().manual_seed(seed)
        self.lengths = list(lengths)
        b, t = len(lengths), max(lengths)
        if sparse is not None:
            raw = torch.randint(0, sparse, (b, t), generator=g)
            ours_raw, their_raw = raw.clone(), raw.clone()
        else:
            raw = torch.randn(b, t, feature, generator=g)
            ours_raw, their_raw = raw.clone(), raw.clone()
            for i, n in enumerate(lengths):
                ours_raw[i, n:] = pad
                their_raw[i, n:] = THEIR_PAD
        self.raw = raw
        lens = torch.tensor(lengths, dtype=torch.int32)
        self.rbatch = RfDim(b, name="batch")
        self.rtime = RfDim(rf.convert_to_tensor(lens, dims=[self.rbatch]), name="time")
        self.batch = dt.Dim(None, name="batch")
        self.time = dt.Dim(dt.Tensor(lens.to(torch.int64), (self.batch,)), name="time")
        if sparse is not None:
            self.rfeat, self.feat = RfDim(sparse, name="vocab"), dt.Dim(sparse, name="vocab")
            self.rx = rf.convert_to_tensor(their_raw, dims=[self.rbatch, self.rtime], sparse_dim=self.rfeat)
            self.x = dt.Tensor(ours_raw, (self.batch, self.time), sparse_dim=self.feat)
        else:
            self.rfeat, self.feat = RfDim(feature, name="feature"), dt.Dim(feature, name="feature")
            self.rx = rf.convert_to_tensor(their_raw.requires_grad_(), dims=[self.rbatch, self.rtime, self.rfeat],
                                           feature_dim=self.rfeat)
            self.x = dt.Tensor(ours_raw.requires_grad_(), (self.batch, self.time, self.feat), feature_dim=self.feat)

    def valid(self) -> torch.Tensor:
        """bool (batch, time): the valid frames."""
        t = torch.arange(max(self.lengths))
        return t[None, :] < torch.tensor(self.lengths)[:, None]


def copy_their_params(rf, theirs, ours, *, seed: int = 1, randomize: bool = True) -> dict:
    """RETURNN's module's state dict (randomized first, so that zero-initialized biases and tables count;
    variances kept positive) loaded into ours through load_returnn_checkpoint; returns it."""
    from returnn.torch.frontend.bridge import rf_module_to_pt_module
    pt = rf_module_to_pt_module(theirs)
    if randomize:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, t in list(pt.named_parameters()) + list(pt.named_buffers()):
                if t.dtype.is_floating_point:
                    noise = torch.randn(t.shape, generator=g) * 0.5
                    t.copy_(noise.abs() + 0.5 if "variance" in name else noise)
    sd = {k: v.detach().clone() for k, v in pt.state_dict().items()}
    drf.load_returnn_checkpoint({"model": sd, "epoch": 1}, ours)
    return sd


def their_raw(t, dims) -> torch.Tensor:
    return t.copy_compatible_to_dims_raw(list(dims))


def compare_valid(ours: torch.Tensor, theirs: torch.Tensor, valid: Optional[torch.Tensor], *, atol=1e-5, rtol=1e-4,
                  what: str = "output"):
    """ours, theirs (batch, time, ...) or (batch, ...): equal on valid frames; ours finite there."""
    ours, theirs = ours.detach(), theirs.detach()
    assert ours.shape == theirs.shape, (what, ours.shape, theirs.shape)
    if valid is None:
        torch.testing.assert_close(ours, theirs, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")
        return
    for b in range(ours.shape[0]):
        torch.testing.assert_close(ours[b][valid[b]], theirs[b][valid[b]], atol=atol, rtol=rtol,
                                   msg=lambda m: f"{what}, sequence {b}: {m}")


def masked_sum(y: torch.Tensor, valid: Optional[torch.Tensor], weights: torch.Tensor) -> torch.Tensor:
    """sum over valid frames of y * weights (y (batch, time, ...)); padding frames never enter (where)."""
    if valid is not None:
        v = valid.view(valid.shape + (1,) * (y.dim() - valid.dim()))
        return torch.where(v, y * weights, 0.0).sum()
    return (y * weights).sum()


def compare_grads(pt_theirs, ours, sd_names: Sequence[str], *, atol=1e-4, rtol=1e-3):
    """The parameters' gradients by name (RETURNN's torch wrapper vs ours); ours finite."""
    theirs = dict(pt_theirs.named_parameters())
    mine = dict(ours.named_parameters())
    for name in sd_names:
        if name not in theirs or theirs[name].grad is None:
            continue
        g = mine[name].grad
        assert g is not None, f"no gradient for {name}"
        assert torch.isfinite(g).all(), f"gradient of {name} not finite"
        torch.testing.assert_close(g, theirs[name].grad, atol=atol, rtol=rtol, msg=lambda m: f"grad {name}: {m}")


def run_pair(rf, data: Data, theirs, ours, call_theirs: Callable, call_ours: Callable, out_dims: Callable, *,
             train: bool = False, atol=1e-5, rtol=1e-4, grad_atol=1e-4, backward: bool = True, randomize=True):
    """Loads RETURNN's parameters into ours, runs both (forward step context, or train step with train=True;
    call_* return the output Tensor), compares outputs over out_dims(side) on valid frames, then gradients of
    a weighted sum over valid frames: parameters by name, and the input's on valid frames (ours finite
    everywhere). Returns (ours' output, theirs)."""
    from returnn.torch.frontend.bridge import rf_module_to_pt_module
    sd = copy_their_params(rf, theirs, ours, randomize=randomize)
    if train:
        rf.init_train_step_run_ctx(train_flag=True)
        drf.init_train_step_run_ctx(train_flag=True)
    else:
        rf.init_forward_step_run_ctx()
        drf.init_forward_step_run_ctx()
    try:
        ry = call_theirs()
        y = call_ours()
    finally:
        drf.reset_run_ctx()
    r_dims, d_dims = out_dims("theirs"), out_dims("ours")
    r_raw, d_raw = their_raw(ry, r_dims), y.raw_aligned(tuple(d_dims))
    has_time = data.time in d_dims
    valid = data.valid() if has_time else None
    compare_valid(d_raw, r_raw, valid, atol=atol, rtol=rtol)
    if backward:
        w = torch.randn(d_raw.shape, generator=torch.Generator().manual_seed(7))
        masked_sum(r_raw, valid, w).backward()
        masked_sum(d_raw, valid, w).backward()
        compare_grads(rf_module_to_pt_module(theirs), ours, list(sd), atol=grad_atol, rtol=1e-3)
        if data.x.raw.requires_grad and data.x.raw.grad is not None:
            gx = data.x.raw.grad
            assert torch.isfinite(gx).all(), "input gradient not finite (padding leaked)"
            rgx = data.rx.raw_tensor.grad
            if rgx is not None:
                compare_valid(gx, rgx, data.valid(), atol=grad_atol, rtol=1e-3, what="input gradient")
    return y, ry


def per_sequence_alone(data: Data, call_ours_on: Callable, y: dt.Tensor, out_dims_fn: Callable, *, atol=1e-5):
    """Each sequence alone (batch of one, its own length, no padding) through ours gives its frames of y.
    call_ours_on(x, batch, time) -> Tensor; out_dims_fn(batch, time) -> its dims order."""
    full = y.raw_aligned(tuple(out_dims_fn(data.batch, data.time))).detach()
    for b, n in enumerate(data.lengths):
        batch = dt.Dim(None, name="batch1")
        time = dt.Dim(dt.Tensor(torch.tensor([n]), (batch,)), name="time1")
        raw = data.x.raw.detach()[b:b + 1, :n].clone()
        dims = (batch, time) + tuple(d for d in data.x.dims[2:])
        x = dt.Tensor(raw, dims, sparse_dim=data.x.sparse_dim, feature_dim=data.x.feature_dim)
        out = call_ours_on(x, batch, time)
        alone = out.raw_aligned(tuple(out_dims_fn(batch, time))).detach()
        torch.testing.assert_close(alone[0, :n], full[b, :n], atol=atol, rtol=1e-4,
                                   msg=lambda m: f"sequence {b} alone: {m}")
