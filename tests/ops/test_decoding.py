"""Tests of python/dimtorch/ops/decoding.py: ctc_greedy_decode and edit_distance against plain Python per
sequence (NaN padding in the logits, garbage labels in padding, length 0), batch independence, errors."""
import itertools
import random

import pytest
import torch

import dimtorch as dt
from helpers import check_batch_independence_by_position


def _greedy(frames, blank):
    return [k for k, _ in itertools.groupby(frames) if k != blank]


def _levenshtein(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row = row, [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (x != y))
    return row[-1]


def _logits(lengths, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    wb = dt.Dim(vocab, name="wb")
    raw = torch.randn(len(lengths), max(lengths) + 1, vocab, generator=g)
    raw[:, :, 2] += 1.0  # make repeats and blanks frequent
    for b, n in enumerate(lengths):
        raw[b, n:] = float("nan")
    return batch, time, wb, dt.Tensor(raw, (batch, time, wb), feature_dim=wb)


def test_ctc_greedy_decode_against_python():
    lengths = [9, 5, 0, 1, 7]
    batch, time, wb, logits = _logits(lengths, 4)
    labels, out_dim = dt.ctc_greedy_decode(logits, in_spatial_dim=time, blank_index=3)
    assert labels.dims == (batch, out_dim) and labels.dtype == "int32" and labels.sparse_dim is wb
    for b, n in enumerate(lengths):
        want = _greedy(logits.raw[b, :n].argmax(-1).tolist(), 3)
        assert out_dim.lengths.raw[b] == len(want)
        assert labels.raw[b, :len(want)].tolist() == want
    # other dims order, blank first, target_dim
    target = dt.Dim(3, name="target")
    t_labels, _ = dt.ctc_greedy_decode(logits.copy_transpose((wb, time, batch)), in_spatial_dim=time, blank_index=3,
                                       target_dim=target)
    assert t_labels.sparse_dim is target and torch.equal(t_labels.raw, labels.raw)
    first, first_dim = dt.ctc_greedy_decode(logits, in_spatial_dim=time, blank_index=2)
    for b, n in enumerate(lengths):
        want = _greedy(logits.raw[b, :n].argmax(-1).tolist(), 2)
        assert first.raw[b, :len(want)].tolist() == want and first_dim.lengths.raw[b] == len(want)


def test_ctc_greedy_decode_batch_independence():
    batch, time, wb, logits = _logits([6, 3, 4], 5, seed=1)
    check_batch_independence_by_position(
        lambda x, m: dt.ctc_greedy_decode(x, in_spatial_dim=m(time), blank_index=4)[0], logits, batch, time)


@pytest.mark.parametrize("cost_table", [True, False])
def test_edit_distance_against_python(cost_table, monkeypatch):
    """Against a Python Levenshtein, with the substitution costs made once as a table and row by row (the
    form for long sequences, where the table would be large)."""
    from dimtorch.ops import decoding as _decoding
    if not cost_table:
        monkeypatch.setattr(_decoding, "_COST_TABLE_MAX", 0)
    rnd = random.Random(0)
    la, lb = [5, 0, 3, 7, 2], [4, 3, 0, 7, 6]
    batch = dt.Dim(None, name="batch")
    ta = dt.Dim(dt.Tensor(torch.tensor(la), (batch,)), name="ta")
    tb = dt.Dim(dt.Tensor(torch.tensor(lb), (batch,)), name="tb")
    a = torch.tensor([[rnd.randrange(3) for _ in range(8)] for _ in la])
    b = torch.tensor([[rnd.randrange(3) for _ in range(7)] for _ in lb])
    d = dt.edit_distance(dt.Tensor(a, (batch, ta)), ta, dt.Tensor(b.t().contiguous(), (tb, batch)), tb)
    assert d.dims == (batch,) and d.dtype == "int32"
    assert d.raw.tolist() == [_levenshtein(a[i, :la[i]].tolist(), b[i, :lb[i]].tolist()) for i in range(len(la))]
    # b broadcast over a beam dim of a; static dims
    beam = dt.Dim(2, name="beam")
    a2 = torch.stack([a, a.flip(-1)], 1)
    d2 = dt.edit_distance(dt.Tensor(a2, (batch, beam, ta)), ta, dt.Tensor(b, (batch, tb)), tb, dtype="int64")
    assert d2.dims == (batch, beam) and d2.dtype == "int64"
    for i in range(len(la)):
        for k in range(2):
            assert d2.raw[i, k] == _levenshtein(a2[i, k, :la[i]].tolist(), b[i, :lb[i]].tolist())
    s1, s2 = dt.Dim(4, name="s1"), dt.Dim(3, name="s2")
    d3 = dt.edit_distance(dt.Tensor(torch.tensor([1, 2, 3, 4]), (s1,)), s1, dt.Tensor(torch.tensor([1, 3, 4]), (s2,)), s2)
    assert d3.dims == () and d3.raw.item() == 1


def test_decoding_errors():
    batch, time, wb, logits = _logits([3, 2], 4)
    with pytest.raises(ValueError, match=r"dimtorch\.ctc_greedy_decode\(\): blank_index must be an int in \[0, 4\)"):
        dt.ctc_greedy_decode(logits, in_spatial_dim=time, blank_index=4)
    with pytest.raises(ValueError, match=r"ctc_greedy_decode\(\): logits have no feature_dim; give wb_target_dim"):
        dt.ctc_greedy_decode(dt.Tensor(logits.raw, logits.dims), in_spatial_dim=time, blank_index=0)
    with pytest.raises(ValueError, match=r"ctc_greedy_decode\(\): target_dim must be a Dim of size blank_index"):
        dt.ctc_greedy_decode(logits, in_spatial_dim=time, blank_index=3, target_dim=dt.Dim(4, name="t"))
    with pytest.raises(ValueError, match=r"ctc_greedy_decode\(\): out_spatial_dim must have the decoded lengths"):
        dt.ctc_greedy_decode(logits, in_spatial_dim=time, blank_index=3, out_spatial_dim=dt.Dim(2, name="o"))
    other = dt.Dim(2, name="other")
    with pytest.raises(ValueError, match=r"dimtorch\.edit_distance\(\): b has dims \('other'\(2\)\) that a lacks"):
        dt.edit_distance(dt.Tensor(torch.zeros(2, 4, dtype=torch.int64), (batch, time)), time,
                         dt.Tensor(torch.zeros(2, 4, dtype=torch.int64), (other, time)), time)


def test_ctc_greedy_decode_fast_path_against_the_definition():
    """The C++ fast path (logits over (batch, time, classes) on the host) against the Python definition, and the
    calls it hands over: another layout, target_dim, out_spatial_dim, a static time dim, a batch with no frames."""
    from dimtorch.ops import decoding as _decoding
    from fast_path_checks import assert_same, both
    lengths = [9, 5, 0, 1, 7]
    batch, time, wb, logits = _logits(lengths, 4, seed=3)
    fast, slow = dt.ctc_greedy_decode, _decoding.ctc_greedy_decode
    for blank in (0, 2, 3):
        labels, out_dim = both(fast, slow, logits, in_spatial_dim=time, blank_index=blank)
        assert labels.dims == (batch, out_dim) and labels.sparse_dim is wb and labels.dtype == "int32"
    both(fast, slow, logits, in_spatial_dim=time, blank_index=3, wb_target_dim=wb)
    both(fast, slow, logits.copy_transpose((time, batch, wb)), in_spatial_dim=time, blank_index=3)
    both(fast, slow, logits, in_spatial_dim=time, blank_index=3, target_dim=dt.Dim(3, name="target"))
    labels, out_dim = fast(logits, in_spatial_dim=time, blank_index=3)
    assert_same(fast(logits, in_spatial_dim=time, blank_index=3, out_spatial_dim=out_dim), (labels, out_dim))
    static = dt.Dim(logits.raw.shape[1], name="frames")
    both(fast, slow, dt.Tensor(logits.raw.nan_to_num(), (batch, static, wb), feature_dim=wb), in_spatial_dim=static,
         blank_index=1)
    for blank in (4, -1, True):
        for fn in (fast, slow):
            with pytest.raises(ValueError, match=r"ctc_greedy_decode\(\): blank_index must be an int"):
                fn(logits, in_spatial_dim=time, blank_index=blank)
