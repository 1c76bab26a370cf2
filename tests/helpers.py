"""Shared test helpers: padded batches, manual alignment, valid-frame masks, and the named-vs-torch check.

Every op test compares a dimtorch op with the positional torch computation it stands for
(`check_against_torch`), forward and backward, on padded data whose padding frames hold NaN or
large values (`make_padded_batch`). The oracle side never uses dimtorch's own alignment: raws are
aligned here with explicit permute/reshape (`align_raw`), so a bug in `raw_aligned` or in the
alignment plans cannot hide itself.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

import torch

import dimtorch as dt

PAD_NAN = float("nan")
PAD_LARGE = 1e30


@dataclasses.dataclass
class PaddedBatch:
    """A padded batch: dims, the Tensor over (batch, time, feature), and its host lengths."""

    batch: dt.Dim  # Dim(None): size from data
    time: dt.Dim  # dynamic: lengths over (batch,)
    feature: dt.Dim  # static
    x: dt.Tensor  # dims (batch, time, feature); frames at t >= lengths[b] hold the pad value
    lengths: list  # host ints, one per sequence

    @property
    def mask(self) -> torch.Tensor:
        """bool raw of shape (batch, time): True on valid frames."""
        return valid_mask(self.x.dims[:2], self.x.shape[:2])


def make_padded_batch(
    lengths: Sequence[int] = (5, 3, 1),
    feature: int = 4,
    *,
    pad_value: float = PAD_NAN,
    extra_time: int = 0,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    dims: Optional[tuple] = None,
) -> PaddedBatch:
    """Random padded batch over (batch, time, feature) with padding filled with `pad_value`.

    `lengths` gives each sequence's length (a 0 is allowed); the raw time axis has
    max(lengths) + `extra_time` frames, so `extra_time` > 0 gives padding in every sequence. `dims`
    reuses existing (batch, time, feature) dims instead of making new ones (their sizes must fit).
    """
    g = torch.Generator().manual_seed(seed)
    n_time = max(lengths) + extra_time
    if dims is None:
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(torch.tensor(list(lengths), dtype=torch.int64), (batch,)), name="time")
        feat = dt.Dim(feature, name="feature")
    else:
        batch, time, feat = dims
    raw = torch.randn(len(lengths), n_time, feat.size, generator=g).to(dtype)
    for b, n in enumerate(lengths):
        raw[b, n:] = pad_value
    x = dt.Tensor(raw, (batch, time, feat), feature_dim=feat)
    return PaddedBatch(batch, time, feat, x, list(lengths))


def align_raw(raw: torch.Tensor, src_dims: Sequence[dt.Dim], dst_dims: Sequence[dt.Dim]) -> torch.Tensor:
    """`raw` (axes in `src_dims` order) permuted to `dst_dims` order, with size-1 axes for dims it lacks.

    Written with plain permute/reshape, independent of dimtorch's alignment code.
    """
    src_dims, dst_dims = list(src_dims), list(dst_dims)
    assert raw.dim() == len(src_dims), (raw.shape, src_dims)
    assert all(any(d is e for e in dst_dims) for d in src_dims), "a source dim is missing in dst_dims"
    index = [next(i for i, e in enumerate(src_dims) if e is d) for d in dst_dims if any(d is e for e in src_dims)]
    permuted = raw.permute(*index) if index else raw
    shape = []
    for d in dst_dims:
        found = [i for i, e in enumerate(src_dims) if e is d]
        shape.append(raw.shape[found[0]] if found else 1)
    return permuted.reshape(shape)


def valid_mask(dims: Sequence[dt.Dim], shape: Sequence[int], device=None) -> torch.Tensor:
    """bool raw of `shape` (axes in `dims` order): False where any dynamic dim is in its padding.

    A dynamic dim whose lengths are over batch dims that are not all in `dims` is not masked
    (without its batch dims, every frame up to the max length counts as valid).
    """
    dims = list(dims)
    mask = torch.ones(tuple(shape), dtype=torch.bool, device=device)
    for axis, d in enumerate(dims):
        lengths = d.lengths
        if lengths is None or not all(any(bd is e for e in dims) for bd in lengths.dims):
            continue
        lens = align_raw(lengths.raw, lengths.dims, dims).to(device)
        view = [1] * len(dims)
        view[axis] = shape[axis]
        frames = torch.arange(shape[axis], device=device).reshape(view)
        mask = mask & (frames < lens)
    return mask


def _leaf_copy(raw: torch.Tensor) -> torch.Tensor:
    leaf = raw.detach().clone()
    if leaf.is_floating_point() or leaf.is_complex():
        leaf.requires_grad_(True)
    return leaf


def _assert_close_at(actual: torch.Tensor, expected: torch.Tensor, mask: torch.Tensor, what: str,
                     rtol, atol, exact_dtype: bool):
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != torch's {tuple(expected.shape)}"
    if exact_dtype:
        assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != torch's {expected.dtype}"
    mask = mask.expand(actual.shape)
    torch.testing.assert_close(actual[mask], expected[mask], rtol=rtol, atol=atol, equal_nan=True,
                               check_dtype=exact_dtype, msg=lambda m: f"{what}: {m}")


def check_against_torch(
    dt_fn: Callable,
    torch_fn: Callable,
    inputs: Sequence,
    *,
    out_dims: Optional[Sequence[dt.Dim]] = None,
    expect_dims: Optional[Sequence[dt.Dim]] = None,
    backward: bool = True,
    mask_padding: bool = True,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    exact_dtype: bool = True,
    seed: int = 0,
):
    """Checks a named op against its positional torch equivalent, forward and backward.

    - `dt_fn(*inputs)` runs on dimtorch Tensors; it returns a dt.Tensor (or a tuple/list of them).
    - `torch_fn(*raws)` gets each Tensor input's raw (axes in that Tensor's dims order; Python
      scalars and other non-Tensor inputs are passed as they are) and returns the raw result (or a
      tuple/list of them) with axes in `out_dims` order.
    - `out_dims` (one dims sequence per output; a single sequence for a single output): the axes
      order of torch_fn's results. Default: the dims of dt_fn's results, in their own order.
    - `expect_dims`: if given, dt_fn's (first) result must have exactly these dims, in this order.
    - Values are compared at valid frames only when `mask_padding` (padding frames of dynamic
      dims in the output, see `valid_mask`), with NaN == NaN, so data padded with NaN/1e30
      can be used; dtypes must match exactly unless `exact_dtype=False`.
    - Backward (when `backward` and a result is floating): both sides backpropagate the same
      random cotangent through `where(valid, out, 0)` (padding frames of the outputs get no
      gradient); the gradient of every floating Tensor input is compared at its valid frames.
      Each side works on its own leaf copies of the inputs, so the inputs are left untouched.
    - `rtol`/`atol`: torch.testing.assert_close tolerances (None: its defaults for the dtype).

    Returns (dt results, torch results) as lists of raws aligned to `out_dims`, for further checks.
    """
    dt_leaves, torch_leaves, dt_args, torch_args = [], [], [], []
    for v in inputs:
        if isinstance(v, dt.Tensor):
            a, b = _leaf_copy(v.raw), _leaf_copy(v.raw)
            dt_leaves.append(a)
            torch_leaves.append(b)
            dt_args.append(dt.Tensor(a, v.dims, sparse_dim=v.sparse_dim, feature_dim=v.feature_dim))
            torch_args.append(b)
        else:
            dt_leaves.append(None)
            torch_leaves.append(None)
            dt_args.append(v)
            torch_args.append(v)

    dt_out = dt_fn(*dt_args)
    torch_out = torch_fn(*torch_args)
    single = not isinstance(dt_out, (tuple, list))
    dt_outs = [dt_out] if single else list(dt_out)
    torch_outs = [torch_out] if single else list(torch_out)
    assert len(dt_outs) == len(torch_outs), f"{len(dt_outs)} dimtorch results vs {len(torch_outs)} torch results"
    for o in dt_outs:
        assert isinstance(o, dt.Tensor), f"dt_fn returned {type(o).__name__}, not a dimtorch.Tensor"
    if expect_dims is not None:
        got = dt_outs[0].dims
        assert len(got) == len(expect_dims) and all(a is b for a, b in zip(got, expect_dims)), (
            f"result dims {got} != expected {tuple(expect_dims)}")
    if out_dims is None:
        dims_per_out = [o.dims for o in dt_outs]
    elif single:
        dims_per_out = [tuple(out_dims)]
    else:
        dims_per_out = [tuple(d) for d in out_dims]

    aligned, masks = [], []
    for i, (o, t, dims) in enumerate(zip(dt_outs, torch_outs, dims_per_out)):
        # The result's raw shape must agree with its dims (what the constructor would check).
        assert tuple(o.raw.shape) == tuple(o.shape), f"result {i}: raw shape {tuple(o.raw.shape)} != shape {o.shape}"
        a = align_raw(o.raw, o.dims, dims)
        mask = valid_mask(dims, a.shape, device=a.device) if mask_padding else torch.ones((), dtype=torch.bool)
        _assert_close_at(a, t, mask, f"result {i} values", rtol, atol, exact_dtype)
        aligned.append(a)
        masks.append(mask)

    if backward:
        g = torch.Generator().manual_seed(seed)
        dt_loss, torch_loss = 0, 0
        for a, t, mask in zip(aligned, torch_outs, masks):
            if not (a.is_floating_point() and a.requires_grad and t.requires_grad):
                continue
            cot = torch.randn(a.shape, generator=g, dtype=a.dtype).to(a.device)
            dt_loss = dt_loss + (torch.where(mask, a, 0) * cot).sum()
            torch_loss = torch_loss + (torch.where(mask, t, 0) * cot).sum()
        if isinstance(dt_loss, torch.Tensor):
            dt_loss.backward()
            torch_loss.backward()
            for i, (v, a, b) in enumerate(zip(inputs, dt_leaves, torch_leaves)):
                if a is None or not a.requires_grad:
                    continue
                assert (a.grad is None) == (b.grad is None), (
                    f"input {i}: gradient is {a.grad is not None} for dimtorch, {b.grad is not None} for torch")
                if a.grad is None:
                    continue
                mask = valid_mask(v.dims, a.shape) if mask_padding else torch.ones((), dtype=torch.bool)
                _assert_close_at(a.grad, b.grad, mask, f"input {i} gradient", rtol, atol, exact_dtype)
    return aligned, torch_outs


def live_counts() -> tuple:
    """(live Tensors, live Dims) after emptying dimtorch's caches and collecting garbage."""
    import gc

    dt._C._clear_caches()
    gc.collect()
    return dt._C._live_counts()


# --- Sequence-op checks (issue 4): padding invariance and batch independence. ---

def grads_of(fn: Callable, x: dt.Tensor, *, seed: int = 0):
    """Runs `fn(x)` on a leaf copy of x and backpropagates a fixed random cotangent through the
    valid frames of each floating result; returns (result raws, x's gradient or None)."""
    leaf = _leaf_copy(x.raw)
    out = fn(dt.Tensor(leaf, x.dims, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim))
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    g = torch.Generator().manual_seed(seed)
    loss = 0
    for o in outs:
        if o.raw.is_floating_point() and o.raw.requires_grad:
            cot = torch.randn(o.raw.shape, generator=g, dtype=o.raw.dtype)
            loss = loss + (torch.where(valid_mask(o.dims, o.raw.shape), o.raw, 0) * cot).sum()
    if isinstance(loss, torch.Tensor):
        loss.backward()
    return [o.raw.detach() for o in outs], [o.dims for o in outs], leaf.grad


def check_padding_invariance(fn: Callable, lengths: Sequence[int] = (5, 3, 0, 1), *, feature: int = 4,
                             extra_time: int = 1, pads: Sequence[float] = (0.0, PAD_NAN, PAD_LARGE, -PAD_LARGE),
                             finite_grads: bool = True, rtol=None, atol=None):
    """`fn(x)` on one batch whose padding holds each of `pads` in turn: valid outputs and valid
    gradients must not change; with `finite_grads`, x's gradient holds no NaN/inf anywhere
    (padding included) — what a masking op must guarantee. Returns the pad-0 run's (outs, grad)."""
    base = make_padded_batch(lengths, feature, pad_value=pads[0], extra_time=extra_time)
    dims = (base.batch, base.time, base.feature)
    x_mask = valid_mask(base.x.dims, base.x.shape)
    ref_outs, out_dims, ref_grad = grads_of(fn, base.x)
    for pad in pads:
        pb = make_padded_batch(lengths, feature, pad_value=pad, extra_time=extra_time, dims=dims)
        outs, _, grad = grads_of(fn, pb.x)
        for i, (o, r, d) in enumerate(zip(outs, ref_outs, out_dims)):
            m = valid_mask(d, o.shape).expand(o.shape)
            torch.testing.assert_close(o[m], r[m], rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda s: f"pad {pad}: result {i} valid values changed: {s}")
        if ref_grad is None:
            assert grad is None
            continue
        torch.testing.assert_close(grad[x_mask.expand(grad.shape)], ref_grad[x_mask.expand(grad.shape)],
                                   rtol=rtol, atol=atol, msg=lambda s: f"pad {pad}: valid gradients changed: {s}")
        where = grad if finite_grads else grad[x_mask.expand(grad.shape)]
        assert torch.isfinite(where).all(), f"pad {pad}: gradient has NaN/inf: {grad}"
    return ref_outs, ref_grad


def _each_sequence_alone(fn: Callable, x: dt.Tensor, batch: dt.Dim, time: dt.Dim):
    """For each sequence b of length n: (b, n, its batch dim, its time dim, pairs of (result alone, result
    in the batch)), the sequence alone being x's sequence b sliced to its length over dims of its own."""
    full = fn(x, lambda d: d)
    fulls = list(full) if isinstance(full, (tuple, list)) else [full]
    bax, tax = x.dims.index(batch), x.dims.index(time)
    for b, n in enumerate(time.lengths.raw.tolist()):
        b1 = dt.Dim(None, name="batch1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n], dtype=torch.int64), (b1,)), name="time1")
        fwd = {id(batch): b1, id(time): t1}
        raw = x.raw.narrow(bax, b, 1).narrow(tax, 0, n)
        xb = dt.Tensor(raw, tuple(fwd.get(id(d), d) for d in x.dims), feature_dim=x.feature_dim)
        one = fn(xb, lambda d: fwd.get(id(d), d))
        ones = list(one) if isinstance(one, (tuple, list)) else [one]
        yield b, n, b1, t1, list(zip(ones, fulls))


def check_batch_independence(fn: Callable, x: dt.Tensor, batch: dt.Dim, time: dt.Dim, *, rtol=None, atol=None):
    """Each sequence alone (its own batch and time dims, sliced to its length) must give, through
    `fn(x, dim_map)`, what it gives inside the batch. `dim_map(d)` maps the batch's dims to the
    sequence's (identity for the batch call), for ops that take dims as arguments."""
    for b, n, b1, t1, pairs in _each_sequence_alone(fn, x, batch, time):
        back = {id(b1): batch, id(t1): time}
        for i, (o, f) in enumerate(pairs):
            orig = [back.get(id(d), d) for d in o.dims]
            expected = align_raw(f.raw, f.dims, orig)
            for ax, d in enumerate(orig):
                if d is batch:
                    expected = expected.narrow(ax, b, 1)
                elif d is time:
                    expected = expected.narrow(ax, 0, n)
            torch.testing.assert_close(o.raw, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda s: f"sequence {b} (length {n}), result {i}: {s}")


def check_batch_independence_by_position(fn: Callable, x: dt.Tensor, batch: dt.Dim, time: dt.Dim, *, rtol=None,
                                         atol=None):
    """check_batch_independence for ops that make new dims (e.g. a frame dim by dim math): each
    sequence alone gives, axis by axis in the result's own order, the batch result's entries of that
    sequence within the alone result's sizes (its valid frames: the alone call has no padding)."""
    for b, n, b1, _, pairs in _each_sequence_alone(fn, x, batch, time):
        for i, (o, f) in enumerate(pairs):
            assert len(o.dims) == len(f.dims), f"result {i}: dims {o.dims} alone vs {f.dims} in the batch"
            expected = f.raw
            for ax, (d_one, d_full) in enumerate(zip(o.dims, f.dims)):
                if d_full is batch:
                    assert d_one is b1, f"result {i}: axis {ax} is the batch dim in the batch, {d_one} alone"
                    expected = expected.narrow(ax, b, 1)
                else:
                    expected = expected.narrow(ax, 0, o.raw.shape[ax])
            torch.testing.assert_close(o.raw, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda s: f"sequence {b} (length {n}), result {i}: {s}")
