"""Ops and loops that read padding frames by their definition (as in RETURNN): reshape merging a dynamic dim,
a loop over the padded extent. Their valid frames take padding values exactly where the positional torch
computation takes them, no more (NaN or 1e30 padding); the masked loop leaks nothing, forward and backward.
(RETURNN's test_reshape and test_while_loop_growing_dim stop on non-finite outputs with NaN padding, on RETURNN
too: these pin down that the NaN there comes from the tests' own computations.)"""
import pytest
import torch

import dimtorch as dt
import dimtorch.rf as drf
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence, make_padded_batch


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_reshape_over_a_dynamic_dim_is_positional(pad):
    """(time, feature) -> (feature, time) is the raw reshape: a valid frame (b, i, t) holds the raw element
    i * T + t of its sequence: padding exactly where that element lies beyond the sequence's length."""
    b = make_padded_batch((5, 3, 0), feature=4, pad_value=pad)  # the raw time axis is the longest's (as RETURNN's)
    T, F = b.x.raw.shape[1], b.x.raw.shape[2]
    out, _ = check_against_torch(lambda t: dt.reshape(t, (b.time, b.feature), (b.feature, b.time)),
                                 lambda r: r.reshape(r.shape[0], F, T), [b.x], mask_padding=False,
                                 expect_dims=(b.batch, b.feature, b.time))
    o = out[0].detach()
    for s, n in enumerate(b.lengths):
        source_frame = (torch.arange(F)[:, None] * T + torch.arange(n)[None, :]) // F  # (feature, valid time)
        reads_padding = source_frame >= n
        got = o[s, :, :n]
        assert torch.equal(got == pad if pad == PAD_LARGE else got.isnan(), reads_padding)


def _sum_over_padded_extent(x, time, masked: bool):
    """A while loop over all raw frames (TensorArray.unstack over time), summing them; `masked` sums only
    each sequence's own frames."""
    xs = drf.TensorArray.unstack(x, axis=time)
    lengths = time.dyn_size_ext

    def body(state):
        t, acc = state
        frame = xs[t]
        if masked:
            frame = dt.where(t < lengths, frame, 0.0)
        return t + 1, acc + frame

    zero = dt.reduce_sum(dt.zeros_like(x), axis=time)  # (batch, feature); also for a sequence of no frames
    _, acc = drf.while_loop(cond=lambda s: s[0] < len(xs), body=body, initial=(dt.Tensor(torch.tensor(0), ()), zero))
    return acc


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_loop_over_the_padded_extent(pad):
    """Unmasked: every raw frame is summed (the positional sum over the raw time axis), so a shorter
    sequence's result holds its padding; masked: each sequence's own frames only, batch independent."""
    b = make_padded_batch((5, 3, 0), feature=4, pad_value=pad)  # the raw time axis is the longest's (as RETURNN's)
    out, _ = check_against_torch(lambda t: _sum_over_padded_extent(t, b.time, masked=False), lambda r: r.sum(1),
                                 [b.x], backward=False)
    reads_padding = torch.tensor([n < b.x.raw.shape[1] for n in b.lengths])[:, None].expand(out[0].shape)
    assert torch.equal(out[0].detach().abs() >= pad if pad == PAD_LARGE else out[0].detach().isnan(), reads_padding)
    mask = torch.arange(b.x.raw.shape[1])[None, :, None] < torch.tensor(b.lengths)[:, None, None]
    out, _ = check_against_torch(lambda t: _sum_over_padded_extent(t, b.time, masked=True),
                                 lambda r: torch.where(mask, r, 0.0).sum(1), [b.x])
    assert torch.isfinite(out[0]).all()
    check_batch_independence(lambda t, m: _sum_over_padded_extent(t, m(b.time), masked=True), b.x, b.batch, b.time)
