"""Benchmark rows of the ops added for RETURNN-frontend coverage (issue 13, part A): elementwise math, masked
select/scatter, reshape, replace_dim_v2, search_sorted, repeat, the scatter modes, label smoothing (of gradients,
probabilities and labels), reduce_logmeanexp, lerp, scatter_count, top_k_mask, top_p_mask, reduce_out,
scaled_gradient_ext; conv/pool with int padding, 3-D conv and pool, window, specaugment.

Same conventions as rows.py and rows_array.py: each row three ways; the PyTorch side is what a competent user
writes for the same computation (the same masking and, where the size of the result depends on data, the
same one read to the host); what such a user makes once per batch is made by the builder. rows.py appends
these rows to its ROWS: import rows, not this module.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import dimtorch as dt

from .row import BTF, Row, _rf

_SMOOTHING = 0.1


# ---- helpers of the PyTorch side ----------------------------------------------------------------------------

def _mask2(s):
    """(batch, time) bool: the valid frames (the PyTorch user's mask, made once per batch)."""
    return s.mask3[:, :, 0]


def _torch_masked_select_rows(x, cond, valid):
    """Per sequence: the frames where cond holds (and valid), packed to the front, padding 0; one host read."""
    m = cond & valid
    n = int(m.sum(1).max())
    pos = torch.where(m, m.cumsum(1) - 1, n)
    out = x.new_zeros(x.shape[0], n + 1, x.shape[2]).scatter_add_(1, pos.unsqueeze(-1).expand(x.shape), x)
    return out[:, :n]


def _torch_masked_scatter_rows(y, cond, valid):
    """Inverse of _torch_masked_select_rows: frame k of each packed sequence back where cond holds, 0 elsewhere."""
    m = cond & valid
    pos = (m.cumsum(1) - 1).clamp(0, y.shape[1] - 1)
    values = y.gather(1, pos.unsqueeze(-1).expand(m.shape + (y.shape[2],)))
    return torch.where(m.unsqueeze(-1), values, 0.0)


def _packed(s, api_side):
    """The packed input of the masked_scatter row on one side, made outside the timed region."""
    if api_side == "torch":
        return _torch_masked_select_rows(s.x, s.cond, _mask2(s))
    if api_side == "dimtorch":
        return dt.masked_select(s.x, mask=s.cond, dims=(s.time,))
    return _rf(s).masked_select(s.x, mask=s.cond, dims=[s.time])


def _repeats_raw(s):
    """Repeat counts 0..2 per frame over (batch, time), from a fixed seed (garbage in the padding)."""
    g = torch.Generator().manual_seed(3)
    return torch.randint(0, 3, (s.shapes.batch, s.shapes.time), generator=g).to(s.device)


def _torch_repeat(s):
    """Per sequence, frame t repeated repeats[t] times: one host read of the repeats, then cumsum, searchsorted,
    gather (the same computation as dimtorch's). Puts the valid output frames aside as `repeat_valid`."""
    reps = _repeats_raw(s)
    valid = _mask2(s)
    host = torch.where(valid, reps, 0).cpu()
    lengths = host.sum(1)
    s.repeat_valid = (torch.arange(int(lengths.max()))[None, :] < lengths[:, None])[:, :, None].to(s.device)

    def run(x=s.x, r=reps, valid=valid, T=s.T):
        r = torch.where(valid, r, 0)
        counts = r.cpu().sum(1)
        n = int(counts.max())
        cum = r.cumsum(1)
        frames = torch.arange(n, device=x.device).expand(x.shape[0], n)
        index = torch.searchsorted(cum, frames.contiguous(), side="right").clamp(max=T - 1)
        return x.gather(1, index.unsqueeze(-1).expand(x.shape[0], n, x.shape[2]))
    return run


def _torch_scatter_reduce(s, reduce, fill=0.0, neutral=None):
    """The labels' padding sent to an extra row `vocab` that is cut off (max/min: padding values set neutral)."""
    shape = (s.B, s.shapes.vocab + 1, s.F)

    def run(x=s.x, labels=s.labels, m=_mask2(s), m3=s.mask3, shape=shape, V=s.shapes.vocab):
        idx = torch.where(m, labels, V)
        if neutral is not None:
            x = torch.where(m3, x, neutral)
        return x.new_full(shape, fill).scatter_reduce_(1, idx.unsqueeze(-1).expand(x.shape), x, reduce,
                                                       include_self=False)[:, :V]
    return run


def _torch_scatter_logmeanexp(s):
    V = s.shapes.vocab

    def run(x=s.x, labels=s.labels, m=_mask2(s), valid=s.mask3, V=V):
        idx = torch.where(m, labels, V)
        shape = (x.shape[0], V + 1, x.shape[2])
        index = idx.unsqueeze(-1).expand(x.shape)
        counts = torch.zeros(shape[:2], dtype=torch.int64, device=x.device).scatter_add_(
            1, idx, torch.ones((), dtype=torch.int64, device=x.device).expand(idx.shape))
        xm = torch.where(valid, x, float("-inf"))
        with torch.no_grad():
            top = x.new_full(shape, float("-inf")).scatter_reduce_(1, index, xm, "amax", include_self=False)
        shift = torch.where(torch.isfinite(top), top, 0.0)
        total = x.new_zeros(shape).scatter_add_(1, index, torch.exp(xm - shift.gather(1, index)))
        out = torch.log(total) + shift - torch.log(counts.clamp(min=1).to(x.dtype)).unsqueeze(-1)
        return out[:, :V]
    return run


def _torch_scatter_argmax(s):
    V = s.shapes.vocab

    def run(x=s.x, labels=s.labels, m=_mask2(s), valid=s.mask3, V=V):
        idx = torch.where(m, labels, V)
        shape = (x.shape[0], V + 1, x.shape[2])
        T = x.shape[1]
        index = idx.unsqueeze(-1).expand(x.shape)
        counts = torch.zeros(shape[:2], dtype=torch.int64, device=x.device).scatter_add_(
            1, idx, torch.ones((), dtype=torch.int64, device=x.device).expand(idx.shape))
        xm = torch.where(valid, x, float("-inf"))
        with torch.no_grad():
            top = x.new_full(shape, float("-inf")).scatter_reduce_(1, index, xm, "amax", include_self=False)
        candidates = torch.where(xm == top.gather(1, index), torch.arange(T, device=x.device).view(1, T, 1), T)
        out = torch.full(shape, T, dtype=torch.int64, device=x.device).scatter_reduce_(1, index, candidates, "amin")
        return torch.where((counts.unsqueeze(-1) > 0) & (out < T), out, -1)[:, :V]
    return run


class _TorchSmoothedGradient(torch.autograd.Function):
    """A PyTorch user's own label-smoothed gradient: identity forward, grad * scale + shift * sum |grad|."""

    @staticmethod
    def forward(ctx, x, scale, shift):
        ctx.scale, ctx.shift = scale, shift
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale + ctx.shift * grad.abs().sum(dim=-1, keepdim=True), None, None


def _with_feature(s):
    """s.x with feature as its feature_dim (reduce_out needs one), made outside the timed region."""
    if hasattr(s.x, "raw_tensor"):  # RETURNN's Tensor
        x = s.x.copy()
        x.feature_dim = s.feature
        return x
    return dt.Tensor(s.x.raw, s.x.dims, feature_dim=s.feature)


def _leaf(raw):
    return raw.detach().clone().requires_grad_(True)


def _smoothing_factors(n):
    floor = _SMOOTHING / (n - 1)
    return 1.0 - n * floor, -floor


def _torch_smoothed_ce(s):
    x, cot = _leaf(s.x), -F.one_hot(s.labels, s.shapes.vocab)[:, :, :s.F].float() * s.mask3
    scale, shift = _smoothing_factors(s.F)

    def run(x=x, cot=cot, scale=scale, shift=shift):
        x.grad = None
        (_TorchSmoothedGradient.apply(x, scale, shift) * cot).sum().backward()
        return x.grad
    return run


def _named_smoothed_ce(s, fn):
    x = s.api.tensor(_leaf(s.raw.x), (s.batch, s.time, s.feature))
    cot = -F.one_hot(s.raw.labels, s.shapes.vocab)[:, :, :s.shapes.feature].float() * s.raw.mask[:, :, None]
    raw_x = x.raw if hasattr(x, "raw") else x.raw_tensor

    def run(x=x, raw_x=raw_x, cot=cot):
        raw_x.grad = None
        out = fn(x)
        ((out.raw if hasattr(out, "raw") else out.raw_tensor) * cot).sum().backward()
        return raw_x.grad
    return run


def _bounds(s):
    """Sorted boundaries over `out` (the search_sorted row), a raw made once."""
    g = torch.Generator().manual_seed(4)
    return torch.randn(s.shapes.out, generator=g).sort().values.to(s.device)


def _keep_time_plus_2(s):
    """(batch, time + 2, 1): frames before each sequence's end (replace_dim_v2 keeps those, 0 after)."""
    return (torch.arange(s.T + 2, device=s.device)[None, :] < s.lengths.to(s.device)[:, None])[:, :, None]


def _torch_scatter_count(s):
    """Per sequence, how often each vocab entry occurs among the valid frames' labels (int32)."""
    V = s.shapes.vocab
    ones = torch.ones(s.labels.shape, dtype=torch.int32, device=s.device)

    def count(y=s.labels, m=_mask2(s), ones=ones, V=V):
        out = torch.zeros(y.shape[0], V + 1, dtype=torch.int32, device=y.device)
        return out.scatter_add_(1, torch.where(m, y, V), ones)[:, :V]
    return count


def _torch_top_p_mask(probs, p):
    """Nucleus mask over the last axis: sorted descending, kept while the mass before stays <= p."""
    ordered, order = probs.sort(dim=-1, descending=True, stable=True)
    keep = ordered.cumsum(-1) <= p
    keep = torch.cat((torch.ones_like(keep[..., :1]), keep[..., :-1]), -1)
    return torch.zeros_like(keep).scatter_(-1, order, keep)


def _probs(s):
    """softmax of x over feature, made once (the top_p_mask row's input)."""
    raw = getattr(s, "raw", s).x.softmax(-1)
    return s.api.tensor(raw, (s.batch, s.time, s.feature)) if hasattr(s, "api") else raw

def _out_valid(s, n_out, out_lengths, shape):
    """(batch, n_out) valid output frames, viewed as `shape` (-1 for batch and time)."""
    return (torch.arange(n_out, device=s.device)[None, :] < out_lengths.to(s.device)[:, None]).view(shape)


def _torch_conv_pad1(s):
    """PyTorch's masked conv with torch's padding 1 and stride 2; the valid output frames go aside as `conv_pad_valid`."""
    k = s.shapes.conv_kernel
    s.conv_pad_valid = _out_valid(s, (s.T + 2 - k) // 2 + 1, (s.lengths + 2 - k) // 2 + 1, (s.B, 1, -1))
    return lambda x=s.x, m=s.mask3, w=s.conv_w: F.conv1d(torch.where(m, x, 0.0).transpose(1, 2), w, stride=2,
                                                        padding=1)


def _torch_max_pool_pad1(s):
    """PyTorch's masked max pool 3, stride 2, padding 1 (-inf: torch's own); valid frames aside as `pool_pad_valid`."""
    s.pool_pad_valid = _out_valid(s, (s.T - 1) // 2 + 1, (s.lengths - 1) // 2 + 1, (s.B, 1, -1))
    return lambda x=s.x, m=s.mask3: F.max_pool1d(torch.where(m, x, float("-inf")).transpose(1, 2), 3, 2, 1)


def _x5(s):
    """x (batch, time, feature) as (batch, time, a=2, b=feature/2, ch=1), raw: three spatial dims, one channel."""
    x = getattr(s, "raw", s).x
    return x.view(x.shape[0], x.shape[1], 2, x.shape[2] // 2, 1)


def _w5(s):
    """A (out, 1, 3, 1, 3) filter from a fixed seed."""
    g = torch.Generator().manual_seed(5)
    return (torch.randn(s.shapes.out, 1, 3, 1, 3, generator=g) / 3.0).to(s.device)


def _named_3d(s):
    """(x5, w5, dims) on a named side: dims = (a, b, ch, ka, kb, kc)."""
    a, b, ch = s.api.dim(2, "a"), s.api.dim(s.shapes.feature // 2, "b"), s.api.dim(1, "ch")
    ks = (s.api.dim(3, "k3a"), s.api.dim(1, "k3b"), s.api.dim(3, "k3c"))
    return (s.api.tensor(_x5(s), (s.batch, s.time, a, b, ch)), s.api.tensor(_w5(s), (s.out, ch) + ks),
            (a, b, ch) + ks)


def _torch_conv3d(s):
    """PyTorch's masked 3-D conv 'same' (kernel (3, 1, 3), torch's padding (1, 0, 1)); valid frames `conv3d_valid`."""
    s.conv3d_valid = s.mask3[:, None, :, :, None]
    return lambda x=_x5(s), m=s.mask3[:, :, :, None, None], w=_w5(s): F.conv3d(
        torch.where(m, x, 0.0).permute(0, 4, 1, 2, 3), w, padding=(1, 0, 1))


def _dt_conv3d(s):
    x, w, (a, b, ch, *ks) = _named_3d(s)
    return lambda x=x, w=w, sp=(s.time, a, b), ks=tuple(ks), ch=ch, o=s.out: dt.conv(
        x, w, in_dim=ch, out_dim=o, in_spatial_dims=sp, filter_size=ks, padding="same")[0]


def _rf_conv3d(s):
    x, w, (a, b, ch, *ks) = _named_3d(s)
    return lambda x=x, w=w, sp=[s.time, a, b], ks=list(ks), ch=ch, o=s.out, conv=_rf(s).conv: conv(
        x, in_dim=ch, out_dim=o, in_spatial_dims=sp, filter=w, filter_size=ks, padding="same", use_mask=True)[0]


def _torch_window(s, size, stride):
    """PyTorch's centered windows of `size` every `stride` frames over masked time (pad 0): pad, then unfold (a view);
    the valid output frames go aside as `window_valid` (batch, out time, 1, 1)."""
    right = size // 2
    n_out = -(-s.T // stride)
    s.window_valid = _out_valid(s, n_out, -(-s.lengths // stride), (s.B, -1, 1, 1))
    return lambda x=s.x, m=s.mask3: F.pad(torch.where(m, x, 0.0), (0, 0, size - 1 - right, right)).unfold(
        1, size, stride)


def _torch_random_mask(x, length, lo, hi, k, max_dims, axis):
    """PyTorch: per batch entry, num in [lo, hi] masks of 1..max_dims frames at distinct positions of `axis` (1 or 2
    of (batch, time, feature)) within `length` (per entry, or an int), all drawn on x's device; zero there."""
    b, n = x.shape[0], x.shape[axis]
    num = (torch.rand(b, device=x.device) * (hi - lo + 1)).floor().long() + lo
    scores = torch.rand(b, n, device=x.device)
    if isinstance(length, torch.Tensor):
        scores = torch.where(torch.arange(n, device=x.device) < length[:, None], scores, -1.0)
    pos = torch.topk(scores, k, dim=-1).indices
    end = torch.minimum(pos + (torch.rand(b, k, device=x.device) * max_dims).floor().long() + 1,
                        length[:, None] if isinstance(length, torch.Tensor) else torch.tensor(length))
    frames = torch.arange(n, device=x.device)
    cond = (frames >= pos[..., None]) & (frames < end[..., None]) & (torch.arange(k, device=x.device)[:, None] <
                                                                     num[:, None, None])
    return torch.where(cond.any(1).unsqueeze(3 - axis), 0.0, x)


def _torch_specaugment(s):
    """PyTorch: SpecAugment's time masks (count range from each sequence's length, factor 100 -> 2..8 for short
    sequences) then feature masks, no host read (the slot bound from the host lengths, made once per batch)."""
    longest = int(s.lengths.max())
    k = min(max(longest // 100, 2) * 4, longest, s.T)

    def run(x=s.x, length=s.lengths.to(s.device), k=k, f=s.shapes.feature):
        lo = length.clamp(max=2)
        hi = torch.minimum((length // 100).clamp(min=2) * 4, length)
        x = _torch_random_mask(x, length, lo, hi, k, 20, 1)
        return _torch_random_mask(x, f, 2, 5, min(5, f), f // 5, 2)
    return run


RF_ROWS = (
    Row("conv1d_pad1_stride2", "conv over dynamic time, feature -> out, kernel 3, int padding 1, stride 2, masked "
        "input", out=("batch", "out", "conv_time"), valid_frames="conv_pad_valid", requires=("conv",),
        torch=_torch_conv_pad1,
        dimtorch=lambda s: lambda x=s.x, w=s.conv_w, f=s.feature, o=s.out, t=(s.time,), k=(s.kernel,):
            dt.conv(x, w, in_dim=f, out_dim=o, in_spatial_dims=t, filter_size=k, padding=1, strides=2)[0],
        returnn=lambda s: lambda x=s.x, w=s.conv_w, f=s.feature, o=s.out, t=[s.time], k=[s.kernel], conv=_rf(s).conv:
            conv(x, in_dim=f, out_dim=o, in_spatial_dims=t, filter=w, filter_size=k, padding=1, strides=2,
                 use_mask=True)[0]),
    Row("pool_max_pad1", "max pool 3, stride 2, int padding 1 over dynamic time, padding never wins",
        out=("batch", "feature", "pooled"), valid_frames="pool_pad_valid", requires=("pool",),
        torch=_torch_max_pool_pad1,
        dimtorch=lambda s: lambda x=s.x, t=(s.time,): dt.pool(x, mode="max", pool_size=3, strides=2, padding=1,
                                                                in_spatial_dims=t)[0],
        returnn=lambda s: lambda x=s.x, t=[s.time], pool=_rf(s).pool:
            pool(x, mode="max", pool_size=3, strides=2, padding=1, in_spatial_dims=t, use_mask=True)[0]),
    Row("window3", "centered windows of 3 frames over dynamic time (frames past each sequence's end: 0)",
        out=("batch", "time", "feature", "w"), valid_frames="window_valid", requires=("window",),
        torch=lambda s: _torch_window(s, 3, 1),
        dimtorch=lambda s: lambda x=s.x, t=s.time, w=s.api.dim(3, "w"): dt.window(x, spatial_dim=t, window_dim=w)[0],
        returnn=lambda s: lambda x=s.x, t=s.time, w=s.api.dim(3, "w"), fn=_rf(s).window:
            fn(x, spatial_dim=t, window_dim=w)[0]),
    Row("window8_stride4", "windows of 8 frames every 4 over dynamic time (chunks with overlap, as chunked attention)",
        out=("batch", "chunk", "feature", "w"), valid_frames="window_valid", requires=("window",),
        torch=lambda s: _torch_window(s, 8, 4),
        dimtorch=lambda s: lambda x=s.x, t=s.time, w=s.api.dim(8, "w"): dt.window(x, spatial_dim=t, window_dim=w,
                                                                                   stride=4)[0],
        returnn=lambda s: lambda x=s.x, t=s.time, w=s.api.dim(8, "w"), fn=_rf(s).window:
            fn(x, spatial_dim=t, window_dim=w, stride=4)[0]),
    Row("specaugment", "SpecAugment at step 5000 (time masks of <= 20 frames, feature masks of <= feature / 5), "
        "per sequence, drawn on the device (random: values not compared)", out=BTF, check="none", meta=False,
        requires=("audio.specaugment",),
        torch=_torch_specaugment,
        dimtorch=lambda s: lambda x=s.x, t=s.time, f=s.feature: dt.audio.specaugment(x, spatial_dim=t, feature_dim=f,
                                                                                      step=5000),
        returnn=lambda s: lambda x=s.x, t=s.time, f=s.feature, fn=_rf(s).audio.specaugment:
            fn(x, spatial_dim=t, feature_dim=f, global_train_step_dependent=False, only_on_train=False)),
    Row("conv3d", "3-D conv 'same' over (dynamic time, 2, feature / 2), 1 -> out channels, kernel (3, 1, 3), "
        "masked input", out=("batch", "out", "time", "a", "b"), valid_frames="conv3d_valid", requires=("conv",),
        torch=_torch_conv3d, dimtorch=_dt_conv3d, returnn=_rf_conv3d),
    Row("squared_difference", "(x - y) ** 2", out=BTF, requires=("squared_difference",),
        torch=lambda s: lambda x=s.x, y=s.y: torch.square(x - y),
        dimtorch=lambda s: lambda x=s.x, y=s.y: dt.squared_difference(x, y),
        returnn=lambda s: lambda x=s.x, y=s.y, fn=_rf(s).squared_difference: fn(x, y)),
    Row("log_add_exp", "log(exp(x) + exp(y))", out=BTF, requires=("log_add_exp",),
        torch=lambda s: lambda x=s.x, y=s.y: torch.logaddexp(x, y),
        dimtorch=lambda s: lambda x=s.x, y=s.y: dt.log_add_exp(x, y),
        returnn=lambda s: lambda x=s.x, y=s.y, fn=_rf(s).log_add_exp: fn(x, y)),
    Row("log_sigmoid", "log(sigmoid(x))", out=BTF, requires=("log_sigmoid",),
        torch=lambda s: lambda x=s.x: F.logsigmoid(x),
        dimtorch=lambda s: lambda x=s.x: dt.log_sigmoid(x),
        returnn=lambda s: lambda x=s.x, fn=_rf(s).log_sigmoid: fn(x)),
    Row("reduce_out_max", "maxout: feature split into pairs, the max of each pair", out=("batch", "time", "readout"),
        requires=("reduce_out",),
        torch=lambda s: lambda x=s.x, shape=(s.B, s.T, s.F // 2, 2): x.view(shape).amax(-1),
        dimtorch=lambda s: lambda x=_with_feature(s): dt.reduce_out(x, mode="max", num_pieces=2),
        returnn=lambda s: lambda x=_with_feature(s), fn=_rf(s).reduce_out: fn(x, mode="max", num_pieces=2)),
    Row("scaled_gradient_ext_fwd_bwd", "gradient scaled and shifted by its sum over feature, forward + backward "
        "of a loss; PyTorch: the user's own autograd Function", out=BTF, requires=("scaled_gradient_ext",), meta=False,
        torch=_torch_smoothed_ce,
        dimtorch=lambda s: _named_smoothed_ce(s, lambda x, f=s.feature, k=_smoothing_factors(s.shapes.feature):
                                              dt.scaled_gradient_ext(x, scale=k[0], shift=k[1],
                                                                     scale_shift_by_sum_over_axis=f)),
        returnn=lambda s: _named_smoothed_ce(s, lambda x, f=s.feature, k=_smoothing_factors(s.shapes.feature),
                                             fn=_rf(s).scaled_gradient_ext:
                                             fn(x, scale=k[0], shift=k[1], scale_shift_by_sum_over_axis=f))),
    Row("masked_select_seq", "per sequence, the frames where cond (batch, time) holds, packed into a new dynamic "
        "dim (counts read on the host)", out=("batch", "masked_select", "feature"), requires=("masked_select",),
        meta=False,
        torch=lambda s: lambda x=s.x, c=s.cond, v=_mask2(s): _torch_masked_select_rows(x, c, v),
        dimtorch=lambda s: lambda x=s.x, c=s.cond, dims=(s.time,): dt.masked_select(x, mask=c, dims=dims)[0],
        returnn=lambda s: lambda x=s.x, c=s.cond, dims=[s.time], fn=_rf(s).masked_select: fn(x, mask=c, dims=dims)[0]),
    Row("masked_select_all", "the valid (batch, time) frames where cond holds, packed into one static dim "
        "(positions read on the host); RETURNN, which would select padding frames too, gets cond & valid",
        out=("masked_select", "feature"), requires=("masked_select",), meta=False,
        torch=lambda s: lambda x=s.x, c=s.cond, v=_mask2(s): x[c & v],
        dimtorch=lambda s: lambda x=s.x, c=s.cond, dims=(s.batch, s.time): dt.masked_select(x, mask=c, dims=dims)[0],
        returnn=lambda s: lambda x=s.x, m=_rf(s).logical_and(s.cond, s.time.get_mask()), dims=[s.batch, s.time],
        fn=_rf(s).masked_select: fn(x, mask=m, dims=dims)[0]),
    Row("masked_scatter_seq", "inverse of masked_select_seq: packed frames back where cond holds, 0 elsewhere",
        out=BTF, requires=("masked_scatter",), meta=False,
        torch=lambda s: lambda y=_packed(s, "torch"), c=s.cond, v=_mask2(s): _torch_masked_scatter_rows(y, c, v),
        dimtorch=lambda s: lambda yd=_packed(s, "dimtorch"), c=s.cond, dims=(s.time,):
            dt.masked_scatter(yd[0], mask=c, dims=dims, in_dim=yd[1]),
        returnn=lambda s: lambda yd=_packed(s, "returnn"), c=s.cond, dims=[s.time], fn=_rf(s).masked_scatter:
            fn(yd[0], mask=c, dims=dims, in_dim=yd[1])),
    Row("reshape", "(heads, head_dim) of (batch, time, heads, head_dim) read as (head_dim, heads)",
        out=("batch", "time", "d2", "h2"), requires=("reshape",),
        torch=lambda s: lambda x=s.x4, shape=(s.B, s.T, s.D, s.H): x.reshape(shape),
        dimtorch=lambda s: lambda x=s.x4, i=(s.heads, s.head_dim), o=(s.api.dim(s.shapes.head_dim, "d2"),
                                                                      s.api.dim(s.shapes.heads, "h2")):
            dt.reshape(x, i, o),
        returnn=lambda s: lambda x=s.x4, i=[s.heads, s.head_dim], o=[s.api.dim(s.shapes.head_dim, "d2"),
                                                                     s.api.dim(s.shapes.heads, "h2")],
        fn=_rf(s).reshape: fn(x, i, o)),
    Row("replace_dim_v2", "dynamic time replaced by time + 2: frames from each sequence's end on read 0",
        out=("batch", "time+2", "feature"), requires=("replace_dim_v2",),
        torch=lambda s: lambda x=s.x, keep=_keep_time_plus_2(s): torch.where(keep, F.pad(x, (0, 0, 0, 2)), 0.0),
        dimtorch=lambda s: lambda x=s.x, t=s.time, o=s.time + 2: dt.replace_dim_v2(x, in_dim=t, out_dim=o),
        returnn=lambda s: lambda x=s.x, t=s.time, o=s.time + 2, fn=_rf(s).replace_dim_v2: fn(x, in_dim=t, out_dim=o)),
    Row("search_sorted", "positions of x (batch, time, feature) in sorted boundaries (out,)",
        out=BTF, requires=("search_sorted",),
        torch=lambda s: lambda x=s.x, b=_bounds(s): torch.searchsorted(b, x, out_int32=True),
        dimtorch=lambda s: lambda x=s.x, b=s.api.tensor(_bounds(s), (s.out,)), o=s.out:
            dt.search_sorted(b, x, axis=o),
        returnn=lambda s: lambda x=s.x, b=s.api.tensor(_bounds(s), (s.out,)), o=s.out, fn=_rf(s).search_sorted:
            fn(b, x, axis=o)),
    Row("repeat", "each frame of dynamic time repeated 0..2 times into a new dynamic dim (repeats read on the host)",
        out=("batch", "repeat", "feature"), requires=("repeat",), meta=False, valid_frames="repeat_valid",
        torch=_torch_repeat,
        dimtorch=lambda s: lambda x=s.x, r=s.api.tensor(_repeats_raw(s), (s.batch, s.time)), t=s.time:
            dt.repeat(x, in_spatial_dim=t, repeats=r)[0],
        returnn=lambda s: lambda x=s.x, r=s.api.tensor(_repeats_raw(s), (s.batch, s.time)), t=s.time,
        fn=_rf(s).repeat: fn(x, in_spatial_dim=t, repeats=r)[0]),
    Row("scatter_mean", "scatter-mean of frames of dynamic time into vocab at labels, padding takes no part",
        out=("batch", "vocab", "feature"), requires=("scatter",),
        torch=lambda s: _torch_scatter_reduce(s, "mean"),
        dimtorch=lambda s: lambda x=s.x, labels=s.labels, t=s.time: dt.scatter(x, indices=labels, indices_dim=t,
                                                                                mode="mean"),
        returnn=lambda s: lambda x=s.x, labels=s.labels, t=s.time, fn=_rf(s).scatter:
            fn(x, indices=labels, indices_dim=t, mode="mean")),
    Row("scatter_max", "scatter-max of frames of dynamic time into vocab at labels, empty positions -inf",
        out=("batch", "vocab", "feature"), requires=("scatter",),
        torch=lambda s: _torch_scatter_reduce(s, "amax", float("-inf"), float("-inf")),
        dimtorch=lambda s: lambda x=s.x, labels=s.labels, t=s.time: dt.scatter(x, indices=labels, indices_dim=t,
                                                                                mode="max"),
        returnn=lambda s: lambda x=s.x, labels=s.labels, t=s.time, fn=_rf(s).scatter:
            fn(x, indices=labels, indices_dim=t, mode="max")),
    Row("scatter_logmeanexp", "scatter-logmeanexp of frames of dynamic time into vocab at labels",
        out=("batch", "vocab", "feature"), requires=("scatter",),
        torch=_torch_scatter_logmeanexp,
        dimtorch=lambda s: lambda x=s.x, labels=s.labels, t=s.time: dt.scatter(x, indices=labels, indices_dim=t,
                                                                                mode="logmeanexp"),
        returnn=lambda s: lambda x=s.x, labels=s.labels, t=s.time, fn=_rf(s).scatter:
            fn(x, indices=labels, indices_dim=t, mode="logmeanexp")),
    Row("scatter_argmax", "scatter-argmax: per vocab entry, the frame of dynamic time with the largest value",
        out=("batch", "vocab", "feature"), requires=("scatter",),
        torch=_torch_scatter_argmax,
        dimtorch=lambda s: lambda x=s.x, labels=s.labels, t=s.time: dt.scatter(x, indices=labels, indices_dim=t,
                                                                                mode="argmax"),
        returnn=lambda s: lambda x=s.x, labels=s.labels, t=s.time, fn=_rf(s).scatter:
            fn(x, indices=labels, indices_dim=t, mode="argmax")),
    Row("label_smoothed_grad_fwd_bwd", "label-smoothed log-prob gradient over feature, forward + backward of a "
        "cross-entropy-like loss; PyTorch: the user's own autograd Function", out=BTF, requires=(
            "label_smoothed_log_prob_gradient",), meta=False,
        torch=_torch_smoothed_ce,
        dimtorch=lambda s: _named_smoothed_ce(s, lambda x, f=s.feature: dt.label_smoothed_log_prob_gradient(
            x, _SMOOTHING, axis=f)),
        returnn=lambda s: _named_smoothed_ce(s, lambda x, f=s.feature, fn=_rf(s).label_smoothed_log_prob_gradient:
                                             fn(x, _SMOOTHING, axis=f))),
    Row("label_smoothing_probs", "label smoothing of probabilities x (batch, time, feature) over feature",
        out=BTF, requires=("label_smoothing",),
        torch=lambda s: lambda x=s.x, f=_SMOOTHING / (s.F - 1): x * (1.0 - s.F * f) + f,
        dimtorch=lambda s: lambda x=s.x, f=s.feature: dt.label_smoothing(x, _SMOOTHING, axis=f),
        returnn=lambda s: lambda x=s.x, f=s.feature, fn=_rf(s).label_smoothing: fn(x, _SMOOTHING, axis=f)),
    Row("label_smoothing_labels", "label smoothing of int labels (batch, time) into vocab: smooth_one_hot",
        out=("batch", "time", "vocab"), requires=("label_smoothing",),
        torch=lambda s: lambda y=s.labels, v=s.shapes.vocab, f=_SMOOTHING / (s.shapes.vocab - 1):
            F.one_hot(y, v) * (1.0 - _SMOOTHING - f) + f,
        dimtorch=lambda s: lambda y=s.labels: dt.label_smoothing(y, _SMOOTHING),
        returnn=lambda s: lambda y=s.labels, fn=_rf(s).label_smoothing: fn(y, _SMOOTHING)),
    Row("reduce_logmeanexp_time", "log of the mean of exp over each sequence's frames of dynamic time",
        out=("batch", "feature"), requires=("reduce_logmeanexp",),
        torch=lambda s: lambda x=s.x, m=s.mask3, n=s.lengths_col: torch.where(m, x, -float("inf")).logsumexp(1)
            - torch.log(n),
        dimtorch=lambda s: lambda x=s.x, t=s.time: dt.reduce_logmeanexp(x, axis=t),
        returnn=lambda s: lambda x=s.x, t=s.time, fn=_rf(s).reduce_logmeanexp: fn(x, axis=t)),
    Row("lerp", "x + 0.3 (y - x)", out=BTF, requires=("lerp",),
        torch=lambda s: lambda x=s.x, y=s.y: torch.lerp(x, y, 0.3),
        dimtorch=lambda s: lambda x=s.x, y=s.y: dt.lerp(x, y, 0.3),
        returnn=lambda s: lambda x=s.x, y=s.y, fn=_rf(s).lerp: fn(x, y, 0.3)),
    Row("scatter_count", "how often each vocab entry occurs among each sequence's labels (batch, time)",
        out=("batch", "vocab"), requires=("scatter_count",),
        torch=_torch_scatter_count,
        dimtorch=lambda s: lambda y=s.labels, t=s.time: dt.scatter_count(indices=y, indices_dim=t),
        returnn=lambda s: lambda y=s.labels, t=s.time, fn=_rf(s).scatter_count: fn(indices=y, indices_dim=t)),
    Row("top_k_mask", "bool mask of the 3 largest entries over feature of x (batch, time, feature)", out=BTF,
        requires=("top_k_mask",),
        torch=lambda s: lambda x=s.x: torch.zeros_like(x, dtype=torch.bool).scatter_(-1, x.topk(3, -1).indices, True),
        dimtorch=lambda s: lambda x=s.x, f=s.feature: dt.top_k_mask(x, axis=f, k=3),
        returnn=lambda s: lambda x=s.x, f=s.feature, fn=_rf(s).top_k_mask: fn(x, axis=f, k=3)),
    Row("top_p_mask", "nucleus mask (p 0.7, one more) over feature of probabilities (batch, time, feature)",
        out=BTF, requires=("top_p_mask",),
        torch=lambda s: lambda p=_probs(s): _torch_top_p_mask(p, 0.7),
        dimtorch=lambda s: lambda p=_probs(s), f=s.feature: dt.top_p_mask(p, axis=f, p=0.7),
        returnn=lambda s: lambda p=_probs(s), f=s.feature, fn=_rf(s).top_p_mask: fn(p, axis=f, p=0.7)),
)
