"""Tests of python/dimtorch/ops/nested.py: gather_nested (beam reordering, a per-hypothesis dim whose lengths
are gathered), where_nested (and its C++ fast path for a flat state), mask_nested (RETURNN frontend's rules), against indexing
by hand; errors."""
from collections import namedtuple

import pytest
import torch

import dimtorch as dt

State = namedtuple("State", "h count")


def _beam_state():
    batch, beam, f = dt.Dim(None, name="batch"), dt.Dim(3, name="beam"), dt.Dim(2, name="f")
    hist = dt.Dim(dt.Tensor(torch.tensor([[1, 2, 3], [4, 0, 2]]), (batch, beam)), name="hist")
    h = dt.Tensor(torch.arange(12.0).view(2, 3, 2), (batch, beam, f))
    k = dt.Tensor(torch.arange(2 * 3 * 4.0).view(2, 3, 4), (batch, beam, hist))
    static = dt.Tensor(torch.ones(2), (f,))
    return batch, beam, f, hist, {"state": State(h, 7), "k": k, "static": static, "dims": (hist, f), "none": None}


def test_gather_nested_reorders_beams_and_their_dims():
    batch, beam, f, hist, s = _beam_state()
    backrefs = torch.tensor([[2, 2, 0], [1, 0, 1]])
    new_beam = dt.Dim(3, name="beam_new")  # as top_k makes it: hypotheses of this step, pointing to the last's
    indices = dt.Tensor(backrefs, (batch, new_beam), sparse_dim=beam)
    dim_map = {}
    out = dt.gather_nested(s, indices=indices, dim_map=dim_map)
    new_hist = dim_map[hist]
    assert new_hist.lengths.raw.tolist() == [[3, 3, 1], [0, 4, 0]] and out["dims"] == (new_hist, f)
    h = out["state"].h
    assert out["state"].count == 7 and h.dims == (batch, new_beam, f) and out["none"] is None
    assert torch.equal(h.raw, torch.stack([s["state"].h.raw[b, backrefs[b]] for b in range(2)]))
    assert out["k"].dims == (batch, new_beam, new_hist)
    assert torch.equal(out["k"].raw, torch.stack([s["k"].raw[b, backrefs[b]] for b in range(2)]))
    assert out["static"] is s["static"]


def test_where_nested_and_mask_nested():
    batch, beam, f, hist, s = _beam_state()
    cond = dt.Tensor(torch.tensor([[True, False, True], [False, False, True]]), (batch, beam))
    other = {"state": State(dt.Tensor(-s["state"].h.raw, s["state"].h.dims), 7), "k": s["k"], "static": s["static"],
             "dims": (hist, f), "none": None}
    out = dt.where_nested(s, other, condition=cond)
    h = out["state"].h.raw_aligned((batch, beam, f))
    assert torch.equal(h, torch.where(cond.raw[..., None], s["state"].h.raw, -s["state"].h.raw))
    assert out["static"].dims[-1] is f and out["dims"] == (hist, f)
    m = dt.mask_nested(s, mask=cond, mask_value=0.0, allow_dim_extension=False)
    assert torch.equal(m["state"].h.raw_aligned((batch, beam, f)), torch.where(cond.raw[..., None], s["state"].h.raw, 0.0))
    assert m["static"] is s["static"]  # no mask dims: left as it is
    m2 = dt.mask_nested(s, mask=cond, mask_value=other)
    assert torch.equal(m2["state"].h.raw_aligned((batch, beam, f)), h)
    ext = dt.mask_nested(s["static"], mask=cond, mask_value=5.0)  # dim extension: static over (batch, beam, f)
    assert set(ext.dims) == {batch, beam, f}


def test_nested_errors():
    batch, beam, f, hist, s = _beam_state()
    with pytest.raises(ValueError, match=r"dimtorch\.gather_nested\(\): indices need a sparse_dim"):
        dt.gather_nested(s, indices=dt.Tensor(torch.zeros(2, 3, dtype=torch.int64), (batch, beam)))
    cond = dt.Tensor(torch.ones(2, 3, dtype=torch.bool), (batch, beam))
    with pytest.raises(ValueError, match=r"dimtorch\.where_nested\(\): the two structures differ"):
        dt.where_nested((s["k"],), (s["k"], s["k"]), condition=cond)
    with pytest.raises(ValueError, match=r"dimtorch\.where_nested\(\): merging two different dims"):
        dt.where_nested((hist,), (f,), condition=cond)
    with pytest.raises(ValueError, match=r"dimtorch\.mask_nested\(\): a Tensor over \('batch'.*some but not all"):
        dt.mask_nested(dt.Tensor(torch.zeros(2, 2), (batch, f)), mask=cond, mask_value=0.0, allow_dim_extension=False)
    with pytest.raises(TypeError, match=r"dimtorch\.mask_nested\(\): mask_cpu must be a dimtorch\.Tensor, got int"):
        dt.mask_nested((f,), mask=cond, mask_cpu=0, mask_value=(hist,))  # (found by the fuzz test under the sanitizers)


@pytest.mark.parametrize("pad", [float("nan"), 1e30])
def test_mask_nested_merges_two_different_dims(pad):
    """A beam search step's history: the hypotheses with a non-blank label take the history grown by one
    (cum_concat_step's new dim), the others keep the old one. mask_nested merges the two dims into a new
    one with lengths where(mask, new, old) (both map to it in dim_map) and moves the Tensors over either
    onto it: against indexing by hand, forward and backward (padding NaN or 1e30 never reaches a valid
    frame), and each hypothesis as it would be alone."""
    batch, beam = dt.Dim(None, name="batch"), dt.Dim(3, name="beam")
    old_len = torch.tensor([[2, 0, 1], [1, 2, 0]])
    hist = dt.Dim(dt.Tensor(old_len, (batch, beam)), name="hist")
    raw = torch.arange(1.0, 13.0).view(2, 3, 2)
    raw[torch.arange(2)[None, None, :].expand(2, 3, 2) >= old_len[..., None]] = pad
    leaf = raw.clone().requires_grad_(True)
    h = dt.Tensor(leaf, (batch, beam, hist))
    label = dt.Tensor(torch.tensor([[5.0, 6.0, 7.0], [8.0, 9.0, 10.0]]), (batch, beam))
    new_h, new_hist = dt.cum_concat_step(label, prev_accum=h, axis=hist)
    take_new = torch.tensor([[True, False, True], [False, True, True]])
    mask = dt.Tensor(take_new, (batch, beam))
    dim_map = {}
    out, out_dim = dt.mask_nested((new_h, new_hist), mask=mask, mask_value=(h, hist), dim_map=dim_map)
    want_len = torch.where(take_new, old_len + 1, old_len)
    assert out_dim.lengths.raw.tolist() == want_len.tolist()
    assert dim_map[hist] is out_dim and dim_map[new_hist] is out_dim and out.dims == (batch, beam, out_dim)
    for b in range(2):
        for k in range(3):
            n = int(want_len[b, k])
            expected = torch.cat([raw[b, k, :old_len[b, k]], label.raw[b, k:k + 1]]) if take_new[b, k] else \
                raw[b, k, :n]
            assert torch.equal(out.raw[b, k, :n], expected)
    grad = torch.zeros_like(out.raw)
    for b in range(2):
        for k in range(3):
            grad[b, k, :int(want_len[b, k])] = 1.0
    (out.raw * grad).sum().backward()
    valid_old = torch.arange(2)[None, None, :] < old_len[..., None]
    assert torch.equal(leaf.grad, valid_old.float())  # every valid old frame reaches the output once
    cpu = dt.mask_nested((new_h, new_hist), mask=mask, mask_cpu=mask, mask_value=(h, hist))
    assert cpu[1].lengths.raw.tolist() == want_len.tolist()


@pytest.mark.parametrize("as_list", [False, True])
def test_where_nested_flat_fast_path_is_the_definition(as_list):
    """where_nested's C++ fast path (src/ops/nested.cpp: a flat tuple or list of Tensors, the condition aligned
    once for pairs over the same dims) gives the definition's dims, markers, values and gradients against
    torch.where on NaN / 1e30 padding; pairs over other dims (an outer broadcast: the definition's), nested
    structures and errors go to the definition."""
    import inspect
    import sys

    from dimtorch.ops import nested as _nested
    from fast_path_checks import both
    from helpers import PAD_LARGE, PAD_NAN, check_against_torch, make_padded_batch
    pb = make_padded_batch([4, 2, 0], feature=3, extra_time=1, pad_value=PAD_NAN)
    other = make_padded_batch([4, 2, 0], feature=3, extra_time=1, pad_value=PAD_LARGE, seed=1,
                              dims=(pb.batch, pb.time, pb.feature)).x
    cond = dt.Tensor(torch.rand(3, 5, generator=torch.Generator().manual_seed(2)) > 0.5, (pb.batch, pb.time))
    seq = list if as_list else tuple
    x, y = pb.x, other
    xt = x.copy_transpose((pb.feature, pb.batch, pb.time))
    sparse = dt.Tensor(torch.zeros(3, 5, dtype=torch.int64), (pb.batch, pb.time), sparse_dim=pb.feature)
    static = dt.Tensor(torch.ones(3), (pb.feature,))
    for pair in [(seq([x, y]), seq([y, x])), (seq([x, xt]), seq([y, y])), (seq([sparse, x]), seq([sparse, y])),
                 (seq([static, x]), seq([x, static])), (seq([]), seq([]))]:
        out = both(dt.where_nested, _nested.where_nested, *pair, condition=cond)
        assert type(out) is seq
    check_against_torch(lambda c, a, b: dt.where_nested(seq([a, b]), seq([b, a]), condition=c),
                        lambda c, a, b: (torch.where(c[..., None], a, b), torch.where(c[..., None], b, a)),
                        [cond, x, y])
    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is inspect.unwrap(_nested.where_nested).__code__:
            calls.append(1)
    sys.setprofile(profile)
    try:
        dt.where_nested(seq([x, y]), seq([y, x]), condition=cond)
    finally:
        sys.setprofile(None)
    assert not calls
    with pytest.raises(ValueError, match=r"^dimtorch\.where_nested\(\): the two structures differ"):
        dt.where_nested(seq([x]), seq([x, y]), condition=cond)
    with pytest.raises(TypeError, match=r"^dimtorch\.where_nested\(\): .*'dim'"):
        dt.where_nested(seq([x]), seq([y]), condition=cond, dim=pb.time)
