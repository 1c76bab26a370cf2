"""Tests of python/dimtorch/ops/ctc_align.py: ctc_best_path against a brute force over all paths of each sequence
(the int paths have no gradient), NaN / 1e30 padding in the logits and garbage in the
targets' padding, each sequence alone, the durations against plain Python, errors."""
import itertools

import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN


def _collapse(path, blank, label_loop):
    if not label_loop:
        return [k for k in path if k != blank]
    return [k for k, _ in itertools.groupby(path) if k != blank]


def _brute_force(lp, targets, blank, label_loop):
    """The best path of log-probs lp (T, C) through targets, by trying all C^T paths; None if there is none."""
    best, best_path = None, None
    for path in itertools.product(range(lp.shape[1]), repeat=lp.shape[0]):
        if _collapse(path, blank, label_loop) != list(targets):
            continue
        score = float(sum(lp[t, k] for t, k in enumerate(path)))
        if best is None or score > best:
            best, best_path = score, list(path)
    return best_path


def _batch(in_lengths, target_lengths, vocab=4, *, pad=PAD_NAN, seed=0, repeats=False):
    g = torch.Generator().manual_seed(seed)
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor(in_lengths), (batch,)), name="time")
    tt = dt.Dim(dt.Tensor(torch.tensor(target_lengths), (batch,)), name="targets_time")
    classes = dt.Dim(vocab, name="classes")
    raw = torch.randn(len(in_lengths), max(in_lengths) + 1, vocab, generator=g) * 2.0
    for b, n in enumerate(in_lengths):
        raw[b, n:] = pad
    labels = torch.randint(1, vocab, (len(in_lengths), max(target_lengths) + 1), generator=g)
    if repeats:
        labels[:, 1] = labels[:, 0]
    for b, n in enumerate(target_lengths):
        labels[b, n:] = 10 ** 6  # garbage, out of range
    logits = dt.Tensor(raw, (batch, time, classes), feature_dim=classes)
    targets = dt.Tensor(labels, (batch, tt), sparse_dim=classes)
    return batch, time, tt, classes, logits, targets


@pytest.mark.parametrize("label_loop", [True, False])
@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_ctc_best_path_against_brute_force(label_loop, pad):
    in_lengths, target_lengths = [6, 4, 0, 3, 5, 2, 1], [3, 2, 0, 0, 2, 2, 1]  # seq 5: no path with label loop
    batch, time, tt, classes, logits, targets = _batch(in_lengths, target_lengths, pad=pad, repeats=True)
    path = dt.ctc_best_path(logits=logits, targets=targets, input_spatial_dim=time, targets_spatial_dim=tt,
                            blank_index=0, label_loop=label_loop)
    assert path.dims == (time, batch) and path.dtype == "int32" and path.sparse_dim is classes
    assert path.raw.shape == (7, 7)
    lp = torch.log_softmax(logits.raw, -1)
    for b, (n, s) in enumerate(zip(in_lengths, target_lengths)):
        want = _brute_force(lp[b, :n], targets.raw[b, :s].tolist(), 0, label_loop)
        got = path.raw[:, b].tolist()
        assert got[n:] == [0] * (7 - n), f"sequence {b}: padding frames are not blank"
        assert got[:n] == (want if want is not None else [0] * n), f"sequence {b}"


def test_ctc_best_path_blank_last_normalized_and_dims_order():
    in_lengths, target_lengths = [5, 3, 4], [2, 1, 3]
    batch, time, tt, classes, logits, targets = _batch(in_lengths, target_lengths, seed=3)
    lp = dt.log_softmax(logits, axis=classes)
    # blank is the last class here: shift labels into [0, 3)
    shifted = dt.Tensor(targets.raw - 1, targets.dims, sparse_dim=classes)
    path = dt.ctc_best_path(logits=lp.copy_transpose((classes, batch, time)), logits_normalized=True,
                            targets=shifted.copy_transpose((tt, batch)), input_spatial_dim=time,
                            targets_spatial_dim=tt, blank_index=3)
    assert path.dims == (time, batch)
    raw = torch.log_softmax(logits.raw, -1)
    for b, (n, s) in enumerate(zip(in_lengths, target_lengths)):
        want = _brute_force(raw[b, :n], (targets.raw[b, :s] - 1).tolist(), 3, True)
        assert path.raw[:n, b].tolist() == want


def test_ctc_best_path_each_sequence_alone():
    in_lengths, target_lengths = [7, 3, 5, 1], [3, 1, 2, 1]
    batch, time, tt, classes, logits, targets = _batch(in_lengths, target_lengths, seed=5)
    full = dt.ctc_best_path(logits=logits, targets=targets, input_spatial_dim=time, targets_spatial_dim=tt,
                            blank_index=0)
    for b, (n, s) in enumerate(zip(in_lengths, target_lengths)):
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        s1 = dt.Dim(dt.Tensor(torch.tensor([s]), (b1,)), name="s1")
        one = dt.ctc_best_path(
            logits=dt.Tensor(logits.raw[b:b + 1, :n], (b1, t1, classes), feature_dim=classes),
            targets=dt.Tensor(targets.raw[b:b + 1, :s], (b1, s1), sparse_dim=classes),
            input_spatial_dim=t1, targets_spatial_dim=s1, blank_index=0)
        assert torch.equal(one.raw[:, 0], full.raw[:n, b]), f"sequence {b}"


def test_ctc_best_path_broadcasts_targets_over_a_beam_and_static_dims():
    g = torch.Generator().manual_seed(7)
    beam, time, tt, classes = dt.Dim(2, name="beam"), dt.Dim(5, name="time"), dt.Dim(2, name="tt"), dt.Dim(3, "c")
    logits = dt.Tensor(torch.randn(2, 5, 3, generator=g), (beam, time, classes), feature_dim=classes)
    targets = dt.Tensor(torch.tensor([1, 2]), (tt,), sparse_dim=classes)
    path = dt.ctc_best_path(logits=logits, targets=targets, input_spatial_dim=time, targets_spatial_dim=tt,
                            blank_index=0)
    assert path.dims == (time, beam)
    for k in range(2):
        assert path.raw[:, k].tolist() == _brute_force(torch.log_softmax(logits.raw[k], -1), [1, 2], 0, True)


def _torch_durations(path, blank):
    """Frames per state (blank, label 1, blank, ..., label N, blank) of one path, in plain Python: a label
    frame begins a new label unless it repeats the frame before."""
    seen, states, prev = 0, [], blank
    for k in path:
        if k != blank and k != prev:
            seen += 1
        states.append(2 * seen - (k != blank))
        prev = k
    out = [0] * (2 * seen + 1)
    for s in states:
        out[s] += 1
    return out


def _blank_durations(path, blank):
    out = [0]
    for k in path:
        if k == blank:
            out[-1] += 1
        else:
            out.append(0)
    return out


def _paths(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    raw = torch.randint(0, 3, (len(lengths), max(lengths) + 2), generator=g)
    for b, n in enumerate(lengths):
        raw[b, n:] = torch.randint(-5, 9, (raw.shape[1] - n,), generator=g)  # garbage
    return batch, time, dt.Tensor(raw.t().contiguous(), (time, batch))


def test_ctc_durations_from_path_against_python():
    lengths = [9, 4, 0, 1, 6, 8]
    batch, time, path = _paths(lengths)
    durations, out_dim = dt.ctc_durations_from_path(path=path, path_spatial_dim=time, blank_index=0)
    assert durations.dims == (batch, out_dim) and durations.dtype == "int32"
    for b, n in enumerate(lengths):
        want = _torch_durations(path.raw[:n, b].tolist(), 0)
        assert out_dim.lengths.raw[b] == len(want)
        assert durations.raw[b, :len(want)].tolist() == want and not durations.raw[b, len(want):].any()
    # with the targets' dim: out_spatial_dim by dim math, no host read
    counts = torch.tensor([(len(_torch_durations(path.raw[:n, b].tolist(), 0)) - 1) // 2
                           for b, n in enumerate(lengths)])
    tt = dt.Dim(dt.Tensor(counts, (batch,)), name="tt")
    d2, o2 = dt.ctc_durations_from_path(path=path, path_spatial_dim=time, blank_index=0, targets_spatial_dim=tt)
    assert o2 is tt * 2 + 1 and torch.equal(d2.raw, durations.raw)
    bad = dt.Dim(dt.Tensor(counts + 1, (batch,)), name="bad")
    with pytest.raises(RuntimeError):
        dt.ctc_durations_from_path(path=path, path_spatial_dim=time, blank_index=0, targets_spatial_dim=bad)
    dt.ctc_durations_from_path(path=path, path_spatial_dim=time, blank_index=0, targets_spatial_dim=bad,
                               stop_on_failed_check=False)


def test_ctc_durations_fast_path_against_the_definition():
    """The C++ fast path (time last, the targets' dim given and checked) against the Python definition: the
    same durations, dims and out dim; time not last, a static time dim, int32 paths, a blank index past
    int64, unchecked calls and a given out dim go to the definition; a failed check raises on both."""
    from dimtorch.ops import ctc_align as _ctc_align
    from fast_path_checks import both
    lengths = [9, 4, 0, 1, 6, 8]
    batch, time, path_tb = _paths(lengths, seed=5)
    path = dt.Tensor(path_tb.raw.t().contiguous(), (batch, time))  # time last: the common layout
    counts = torch.tensor([(len(_torch_durations(path.raw[b, :n].tolist(), 1)) - 1) // 2
                           for b, n in enumerate(lengths)])
    tt = dt.Dim(dt.Tensor(counts, (batch,)), name="tt")
    fast, slow = dt.ctc_durations_from_path, _ctc_align.ctc_durations_from_path
    kw = dict(path_spatial_dim=time, blank_index=1, targets_spatial_dim=tt)
    durations, out_dim = both(fast, slow, path=path, **kw)
    assert out_dim is tt * 2 + 1 and durations.dims == (batch, out_dim) and durations.dtype == "int32"
    for b, n in enumerate(lengths):
        want = _torch_durations(path.raw[b, :n].tolist(), 1)
        assert durations.raw[b, :len(want)].tolist() == want and not durations.raw[b, len(want):].any()
    both(fast, slow, path=path, **kw, check_dims=True, stop_on_failed_check=True)
    both(fast, slow, path=path_tb, **kw)
    both(fast, slow, path=dt.Tensor(path.raw.int(), path.dims), **kw)
    both(fast, slow, path=path, **kw, out_spatial_dim=tt * 2 + 1)
    both(fast, slow, path=path, **kw, check_dims=False)
    static = dt.Dim(path.raw.shape[1], name="frames")
    full = [(len(_torch_durations(path.raw[b].tolist(), 1)) - 1) // 2 for b in range(len(lengths))]
    both(fast, slow, path=dt.Tensor(path.raw, (batch, static)), path_spatial_dim=static, blank_index=1,
         targets_spatial_dim=dt.Dim(dt.Tensor(torch.tensor(full), (batch,)), name="full"))
    beam = dt.Dim(2, name="beam")  # targets over batch only, the path over (batch, beam, time)
    both(fast, slow, path=dt.Tensor(path.raw[:, None].expand(-1, 2, -1).contiguous(), (batch, beam, time)), **kw)
    bad = dt.Dim(dt.Tensor(counts + 1, (batch,)), name="bad")
    for fn in (fast, slow):
        with pytest.raises(RuntimeError, match=r"ctc_durations_from_path\(\): the lengths of targets_spatial_dim"):
            fn(path=path, path_spatial_dim=time, blank_index=1, targets_spatial_dim=bad)
        with pytest.raises(TypeError, match=r"dimtorch\.ctc_durations_from_path\(\): blank_index must be an int"):
            fn(path=path, path_spatial_dim=time, blank_index=1.0, targets_spatial_dim=tt)
    with pytest.raises(OverflowError, match=r"dimtorch\.ctc_durations_from_path\(\)"):
        fast(path=path, path_spatial_dim=time, blank_index=2**70, targets_spatial_dim=tt)


def test_ctc_no_label_loop_blank_durations_against_python():
    lengths = [9, 4, 0, 1, 6]
    batch, time, path = _paths(lengths, seed=2)
    durations, out_dim = dt.ctc_no_label_loop_blank_durations_from_path(path=path, path_spatial_dim=time,
                                                                        blank_index=2)
    assert durations.dims == (batch, out_dim)
    for b, n in enumerate(lengths):
        want = _blank_durations(path.raw[:n, b].tolist(), 2)
        assert out_dim.lengths.raw[b] == len(want) and durations.raw[b, :len(want)].tolist() == want
    tt = dt.Dim(dt.Tensor(out_dim.lengths.raw - 1, (batch,)), name="tt")
    d2, o2 = dt.ctc_no_label_loop_blank_durations_from_path(path=path, path_spatial_dim=time, blank_index=2,
                                                            targets_spatial_dim=tt)
    assert o2 is tt + 1 and torch.equal(d2.raw, durations.raw)


def test_best_path_then_durations_each_sequence_alone():
    in_lengths, target_lengths = [7, 3, 5], [3, 1, 2]
    batch, time, tt, classes, logits, targets = _batch(in_lengths, target_lengths, seed=9)
    path = dt.ctc_best_path(logits=logits, targets=targets, input_spatial_dim=time, targets_spatial_dim=tt,
                            blank_index=0)
    durations, out_dim = dt.ctc_durations_from_path(path=path, path_spatial_dim=time, blank_index=0,
                                                    targets_spatial_dim=tt)
    assert out_dim is tt * 2 + 1
    for b, n in enumerate(in_lengths):
        want = _torch_durations(path.raw[:n, b].tolist(), 0)
        assert len(want) == 2 * target_lengths[b] + 1 and durations.raw[b, :len(want)].tolist() == want
        assert sum(want) == n


def test_ctc_align_errors():
    batch, time, tt, classes, logits, targets = _batch([3, 2], [1, 1])
    with pytest.raises(ValueError, match=r"dimtorch\.ctc_best_path\(\): blank_index must be an int in \[0, 4\)"):
        dt.ctc_best_path(logits=logits, targets=targets, input_spatial_dim=time, targets_spatial_dim=tt,
                         blank_index=4)
    with pytest.raises(ValueError, match=r"dimtorch\.ctc_best_path\(\): input_spatial_dim .* not in logits|"
                                         r"dimtorch\.ctc_best_path\(\).*'targets_time'"):
        dt.ctc_best_path(logits=logits, targets=targets, input_spatial_dim=tt, targets_spatial_dim=tt, blank_index=0)
    with pytest.raises(TypeError, match=r"dimtorch\.ctc_best_path\(\): targets must be int labels"):
        dt.ctc_best_path(logits=logits, targets=dt.cast(targets, "float32"), input_spatial_dim=time,
                         targets_spatial_dim=tt, blank_index=0)
    with pytest.raises(ValueError, match=r"dimtorch\.ctc_best_path\(\): logits have no feature_dim"):
        extra = dt.Dim(2, name="extra")
        dt.ctc_best_path(logits=dt.Tensor(logits.raw.unsqueeze(0).expand(2, -1, -1, -1), (extra,) + logits.dims),
                         targets=targets, input_spatial_dim=time, targets_spatial_dim=tt, blank_index=0)
    with pytest.raises(TypeError, match=r"dimtorch\.ctc_best_path\(\): logits must be a dimtorch\.Tensor|"
                                        r"dimtorch\.ctc_best_path\(\): .*logits"):
        dt.ctc_best_path(logits=logits.raw, targets=targets, input_spatial_dim=time, targets_spatial_dim=tt,
                         blank_index=0)
    path = dt.Tensor(torch.zeros(2, 3, dtype=torch.int64), (batch, time))
    with pytest.raises(TypeError, match=r"dimtorch\.ctc_durations_from_path\(\): path must be int labels"):
        dt.ctc_durations_from_path(path=dt.cast(path, "float32"), path_spatial_dim=time, blank_index=0)
    with pytest.raises(ValueError, match=r"dimtorch\.ctc_no_label_loop_blank_durations_from_path\(\): "
                                         r"path_spatial_dim .*'targets_time'"):
        dt.ctc_no_label_loop_blank_durations_from_path(path=path, path_spatial_dim=tt, blank_index=0)
    with pytest.raises(TypeError, match=r"dimtorch\.ctc_durations_from_path\(\): targets_spatial_dim must be a Dim"):
        dt.ctc_durations_from_path(path=path, path_spatial_dim=time, blank_index=0, targets_spatial_dim=3)


@pytest.mark.slow  # torch.compile of the Viterbi scan and backtrace
@pytest.mark.parametrize("label_loop", [True, False])
def test_ctc_best_path_compiles_once_for_every_length(label_loop):
    """Under torch.compile the Viterbi pass and the backtrace are torch scans over the symbolic time
    size: batches of new padded lengths reuse the dynamic graph; paths equal eager's (dynamic time with
    NaN padding, and a static time dim)."""
    from compile_helpers import Compiled, padded

    classes = dt.Dim(4, name="classes")

    def best_path(raw, lengths, labels, target_lengths):
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(lengths, (batch,)), name="time")
        tt = dt.Dim(dt.Tensor(target_lengths, (batch,)), name="targets_time")
        logits = dt.Tensor(raw, (batch, time, classes), feature_dim=classes)
        targets = dt.Tensor(labels, (batch, tt), sparse_dim=classes)
        path = dt.ctc_best_path(logits=logits, targets=targets, input_spatial_dim=time, targets_spatial_dim=tt,
                                blank_index=0, label_loop=label_loop)
        static_time = dt.Dim(raw.shape[1], name="static_time")
        whole = dt.ctc_best_path(logits=dt.Tensor(raw.nan_to_num(), (batch, static_time, classes),
                                                  feature_dim=classes),
                                 targets=targets, input_spatial_dim=static_time, targets_spatial_dim=tt, blank_index=0,
                                 label_loop=label_loop)
        return path.copy_masked(0).raw, whole.raw

    # backend eager: the graphs are Dynamo's (AOTAutograd's trace of the scans: the make_fx and export cases of
    # tests/capture/test_compile.py)
    compiled = Compiled(best_path, backend="eager")
    g = torch.Generator().manual_seed(0)
    for i, lengths in enumerate([(5, 3, 2), (4, 5, 2), (7, 1, 6), (9, 2, 3), (3, 3, 3)]):
        raw, lens = padded(lengths, 4, pad=float("nan"), seed=i)
        target_lengths = lens // 2
        labels = torch.randint(1, 4, (len(lengths), int(target_lengths.max()) + 1), generator=g)
        want = best_path(raw, lens, labels, target_lengths)
        got = compiled(raw, lens, labels, target_lengths)
        for w, o in zip(want, got):
            assert torch.equal(o, w), f"batch {i}"
    assert compiled.graphs <= 2, compiled.graphs
    torch._dynamo.reset()  # the compiled code holds the dims of its guards


def test_ctc_best_path_make_fx_symbolic_takes_other_lengths():
    """make_fx with symbolic sizes traces the scans too: the graph takes other batch and padded sizes."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from compile_helpers import padded

    classes = dt.Dim(4, name="classes")

    def best_path(raw, lengths):
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(lengths, (batch,)), name="time")
        tt = dt.Dim(dt.Tensor(lengths // 2, (batch,)), name="targets_time")
        targets = dt.Tensor((torch.arange(raw.shape[1] // 2) % 3 + 1).expand(raw.shape[0], -1), (batch, tt),
                            sparse_dim=classes)
        return dt.ctc_best_path(logits=dt.Tensor(raw, (batch, time, classes), feature_dim=classes), targets=targets,
                                input_spatial_dim=time, targets_spatial_dim=tt, blank_index=0).copy_masked(0).raw

    graph = make_fx(best_path, tracing_mode="symbolic")(*padded((5, 3, 2), 4, pad=float("nan")))
    for i, lengths in enumerate([(4, 5, 2), (7, 1, 6, 2), (9, 2, 3)]):
        raw, lens = padded(lengths, 4, pad=float("nan"), seed=i)
        assert torch.equal(graph(raw, lens), best_path(raw, lens)), lengths
