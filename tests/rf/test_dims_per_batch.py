"""Dims declared once and bound per batch (RETURNN's `dim.dyn_size_ext = Tensor(...)`, TensorDict's
assign_from_raw_tensor_dict_ / assign_padded_): every op on rebound dims gives what it gives on fresh
dims of the same lengths (masks, device copies, index raws, derived dims and every per-dim cache follow
the new lengths), derived dims keep their identity, padding (NaN, 1e30) never leaks, each sequence alone
gives its batched result, binding errors name the call, and RETURNN gives the same where its semantics
are the same (tests/rf_api_parity.py; skipped without `returnn`)."""
from types import SimpleNamespace

import pytest
import torch

import dimtorch as dt
from dimtorch.rf.tensor import Dim, Tensor, TensorDict, batch_dim
from helpers import PAD_LARGE, PAD_NAN
from rf_api_parity import run_both

BATCHES = [(5, 3, 1), (2, 2), (7, 1, 4, 6), (3,), (0, 4, 2)]  # shorter, longer, one sequence, an empty one


@pytest.fixture(autouse=True)
def _unbind_batch_dim():
    yield
    batch_dim.dyn_size_ext = None


def _padded(lengths, feature, pad, seed, extra=0):
    g = torch.Generator().manual_seed(seed)
    raw = torch.randn(len(lengths), max(lengths) + extra, feature, generator=g)
    for b, n in enumerate(lengths):
        raw[b, n:] = pad
    return raw


def _lengths(lengths):
    return torch.tensor(lengths, dtype=torch.int32)


def _bind(time, lengths):
    batch_dim.dyn_size_ext = Tensor("batch", [], dtype="int32", raw_tensor=torch.tensor(len(lengths), dtype=torch.int32))
    time.dyn_size_ext = Tensor("time", [batch_dim], dtype="int32", raw_tensor=_lengths(lengths))


# ---- ops on rebound dims: positional torch, and fresh dims ----------------------------------------

@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_rebound_dims_against_positional_torch(pad):
    time = Dim(Tensor("time", [batch_dim], dtype="int32"))
    feature = Dim(4, name="feature")
    padded_time = time + 3  # dim math on the declared dim, once: follows every batch
    for i, lengths in enumerate(BATCHES):
        _bind(time, lengths)
        raw = _padded(lengths, 4, pad, seed=i, extra=i % 2)  # sometimes padded beyond the longest
        x = Tensor("x", [batch_dim, time, feature], dtype="float32", raw_tensor=raw)
        mean = dt.reduce_mean(x, axis=time).raw
        soft = dt.softmax(x, axis=time).copy_masked(0.0).raw
        y, (out,) = dt.pad(x, axes=time, padding=(1, 2))
        assert out is padded_time and out.lengths.raw.tolist() == [n + 3 for n in lengths]
        total = dt.reduce_sum(y, axis=out).raw
        for b, n in enumerate(lengths):
            seq = raw[b, :n]
            torch.testing.assert_close(mean[b], seq.mean(0) if n else torch.zeros(4))
            torch.testing.assert_close(soft[b, :n], seq.softmax(0))
            assert not soft[b, n:].any()
            torch.testing.assert_close(total[b], seq.sum(0))
        assert time.get_mask().raw.tolist() == [[t < n for t in range(raw.shape[1])] for n in lengths] \
            if raw.shape[1] == max(lengths) else True


def _filter_and_modules(feature):
    g = torch.Generator().manual_seed(1)
    out, k3, pos = Dim(5, name="out"), Dim(3, name="k3"), Dim(6, name="pos")
    torch.manual_seed(0)
    return SimpleNamespace(
        out=out, k3=k3, pos=pos, filter=dt.Tensor(torch.randn(5, 4, 3, generator=g) * 0.3, (out, feature, k3)),
        attention=dt.nn.SelfAttention(feature, None, key_dim_total=Dim(4, name="key"),
                                      value_dim_total=Dim(4, name="value"), num_heads=2, att_dropout=0.0))


def _ops(x: Tensor, kv: Tensor, batch, time, kv_time, feature, m) -> list:
    """Ops that cache something per dim (masks, device lengths, index raws, plans, layouts, positional
    encodings, a module's mask): their results, padding zeroed."""
    out = [dt.reduce_mean(x, axis=time), dt.softmax(x, axis=time), dt.reduce_max(x, axis=time)]
    y, (pt,) = dt.pad(x, axes=time, padding=(1, 2))
    out.append(dt.reduce_sum(y, axis=pt))
    c, cat = dt.concat((x, time), (kv, kv_time))
    out += [c, dt.reduce_sum(c, axis=cat)]
    out.append(dt.reverse_sequence(x, axis=time))
    out.append(dt.pool(x, mode="max", pool_size=2, strides=2, in_spatial_dims=[time], padding="same")[0])
    out.append(dt.conv(x, m.filter, in_dim=feature, out_dim=m.out, in_spatial_dims=[time], filter_size=[m.k3],
                       padding="same")[0])
    out.append(dt.dot_attention(x, kv, kv, key_dim=feature, axis=kv_time, training=False))
    out.append(m.attention(x, axis=time))
    out.append(dt.relative_positional_encoding(query_spatial_dim=time, key_value_spatial_dim=time, feat_dim=m.pos)[0])
    out.append(dt.sinusoidal_positional_encoding(spatial_dim=time, feat_dim=m.pos))
    out.append(dt.pack_padded(x, dims=(batch, time))[0])
    out.append(time.get_size_tensor())
    out.append(dt.last_frame_position_of_dim(time))
    out.append(dt.sequence_mask((batch, time)))
    return [_zero_padding(t) for t in out]


def _zero_padding(t: Tensor) -> Tensor:
    """t with the padding of its dynamic dims zeroed (those whose lengths' dims t has)."""
    dims = [d for d in t.dims if d.is_dynamic() and all(b in t.dims for b in d.lengths.dims)]
    return t.copy_masked(0, dims=dims) if dims else t


def _shape_of(t: Tensor) -> list:
    """Each dim by what it is: a static size, or the lengths of a dynamic one."""
    return [d.size if d.size is not None else d.lengths.raw.tolist() if d.is_dynamic() else None for d in t.dims]


def test_every_cache_follows_rebinding():
    """Each batch, the ops on the declared dims (bound anew) give what they give on fresh dims of the same
    lengths: nothing computed from an earlier batch's lengths survives in a cache."""
    time, kv_time = Dim(Tensor("time", [batch_dim], dtype="int32")), Dim(None, name="kv")
    feature = Dim(4, name="feature")
    m = _filter_and_modules(feature)
    kv_batches = [(2, 4, 3), (6, 1), (1, 1, 2, 3), (5,), (3, 3, 1)]
    for i, (lengths, kv_lengths) in enumerate(zip(BATCHES, kv_batches)):
        _bind(time, lengths)
        kv_time.dyn_size_ext = Tensor("kv", [batch_dim], dtype="int32", raw_tensor=_lengths(kv_lengths))
        raw, kv_raw = _padded(lengths, 4, PAD_NAN, seed=i), _padded(kv_lengths, 4, PAD_NAN, seed=10 + i)
        got = _ops(Tensor("x", [batch_dim, time, feature], raw_tensor=raw),
                   Tensor("kv", [batch_dim, kv_time, feature], raw_tensor=kv_raw), batch_dim, time, kv_time, feature, m)
        fb = dt.Dim(None, name="batch")
        ft = dt.Dim(dt.Tensor(_lengths(lengths), (fb,)), name="time")
        fk = dt.Dim(dt.Tensor(_lengths(kv_lengths), (fb,)), name="kv")
        want = _ops(dt.Tensor(raw, (fb, ft, feature)), dt.Tensor(kv_raw, (fb, fk, feature)), fb, ft, fk, feature, m)
        for k, (g, w) in enumerate(zip(got, want)):
            assert _shape_of(g) == _shape_of(w), f"batch {i}, op {k}"
            torch.testing.assert_close(g.raw, w.raw, equal_nan=True, msg=f"batch {i}, op {k}")


def test_derived_dims_keep_their_identity_and_follow():
    time, other = Dim(Tensor("time", [batch_dim], dtype="int32")), Dim(None, name="other")
    derived = {"T+1": time + 1, "T-2": time - 2, "T*2": time * 2, "T//2": time // 2,
               "ceildiv(T,3)": dt.ceildiv(time, 3), "(T+1)*2": (time + 1) * 2}
    formulas = {"T+1": lambda n: n + 1, "T-2": lambda n: max(n - 2, 0), "T*2": lambda n: 2 * n,
                "T//2": lambda n: n // 2, "ceildiv(T,3)": lambda n: -(-n // 3), "(T+1)*2": lambda n: 2 * (n + 1)}
    for lengths, other_lengths in zip(BATCHES, [(1, 1, 1), (4, 0), (2, 2, 2, 2), (9,), (1, 2, 3)]):
        _bind(time, lengths)
        other.dyn_size_ext = Tensor("other", [batch_dim], dtype="int32", raw_tensor=_lengths(other_lengths))
        concat_a, concat_b = other + time, time + other  # A + T: owned by `other`'s cache, reached from T
        for name, d in derived.items():
            assert d is eval_again(name, time)
            assert d.lengths.raw.tolist() == [formulas[name](n) for n in lengths], name
            assert d.get_max_size() == max(formulas[name](n) for n in lengths)
            assert d.get_mask().raw.shape == (len(lengths), d.get_max_size())
        assert concat_a.lengths.raw.tolist() == [a + b for a, b in zip(other_lengths, lengths)]
        assert concat_b.lengths.raw.tolist() == concat_a.lengths.raw.tolist()
    a_plus_t = other + time
    time.dyn_size_ext = Tensor("time", [batch_dim], dtype="int32", raw_tensor=_lengths((1, 1, 1)))
    assert a_plus_t.lengths.raw.tolist() == [2, 3, 4]  # rebinding B reaches A + B


def eval_again(name, time):
    return {"T+1": lambda: time + 1, "T-2": lambda: time - 2, "T*2": lambda: time * 2, "T//2": lambda: time // 2,
            "ceildiv(T,3)": lambda: dt.ceildiv(time, 3), "(T+1)*2": lambda: (time + 1) * 2}[name]()


def test_unbinding_and_templates():
    time = Dim(Tensor("time", [batch_dim], dtype="int32"))
    t1 = time + 1
    _bind(time, (3, 1))
    assert time.is_dynamic() and t1.lengths.raw.tolist() == [4, 2]
    lengths = time.dyn_size_ext
    assert lengths._frozen and lengths.raw_tensor.dtype == torch.int32
    time.reset_eager()  # unbound: the size comes from data; the declaration stays
    assert not time.is_dynamic() and time.lengths is None and t1.lengths is None and not t1.is_dynamic()
    assert time.dyn_size_ext.raw_tensor is None and time.dyn_size_ext.dims == (batch_dim,)
    x = Tensor("x", [batch_dim, time], dtype="float32", raw_tensor=torch.zeros(2, 9))  # any size, as Dim(None)
    assert x.shape == (2, 9)
    _bind(time, (2, 5))
    assert t1.lengths.raw.tolist() == [3, 6]
    time.dyn_size_ext = None  # forgets the declaration too
    assert time.dyn_size_ext is None
    time.dyn_size_ext = Tensor("time", [batch_dim], dtype="int32")  # declares it again
    assert time.dyn_size_ext.raw_tensor is None


def test_binding_errors_name_the_call():
    time = Dim(Tensor("time", [batch_dim], dtype="int32"))
    f = Dim(3, name="f")
    call = r"dimtorch\.Dim\.dyn_size_ext = \.\.\.: "
    lengths = Tensor("l", [batch_dim], dtype="int32", raw_tensor=_lengths((2, 1)))
    with pytest.raises(ValueError, match=call + r"dim 'f'\(3\) is static"):
        f.dyn_size_ext = lengths
    with pytest.raises(ValueError, match=call + r"dim 'time\+1'.* is derived by dim math"):
        (time + 1).dyn_size_ext = lengths
    free = Dim(None, name="free")
    with pytest.raises(ValueError, match=call + r"the lengths of dim 'free'\(\?\) cannot be over the dim itself"):
        free.dyn_size_ext = Tensor("l", [free], dtype="int32", raw_tensor=_lengths((2, 1)))
    with pytest.raises(TypeError, match=call + "lengths must be an integer Tensor"):
        time.dyn_size_ext = Tensor("l", [batch_dim], dtype="float32", raw_tensor=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=call + "lengths must be >= 0"):
        time.dyn_size_ext = Tensor("l", [batch_dim], dtype="int64", raw_tensor=torch.tensor([-1, 2]))
    with pytest.raises(ValueError, match=call + r"dim 'time'.* was declared with lengths over \('batch'\(\?\)\), got "
                                                r"lengths over \('f'\(3\)\)"):
        time.dyn_size_ext = Tensor("l", [f], dtype="int32", raw_tensor=_lengths((1, 2, 3)))
    with pytest.raises(TypeError, match=call + "expected a dimtorch.Tensor or None, got list"):
        time.dyn_size_ext = [1, 2]
    assert time.lengths is None  # every refusal left it unbound
    _bind(time, (4, 2))
    with pytest.raises(ValueError, match=r"dim 'time'\[batch\] has max length 4 but raw axis 1 has only size 3"):
        Tensor("x", [batch_dim, time], dtype="float32", raw_tensor=torch.zeros(2, 3))  # a stale (shorter) raw


def test_batch_independence_of_rebound_dims():
    """As RETURNN's harness checks it: rebind the same dims to one sequence and its length; each
    sequence alone gives its batched result."""
    time = Dim(Tensor("time", [batch_dim], dtype="int32"))
    feature = Dim(4, name="feature")
    lengths = (5, 2, 4)
    raw = _padded(lengths, 4, PAD_NAN, seed=3)

    def model(x):
        y, (pt,) = dt.pad(x, axes=time, padding=(2, 0))
        return dt.reduce_sum(dt.softmax(y, axis=pt) * y, axis=pt)

    _bind(time, lengths)
    batched = model(Tensor("x", [batch_dim, time, feature], raw_tensor=raw)).raw
    for b, n in enumerate(lengths):
        _bind(time, (n,))
        alone = model(Tensor("x", [batch_dim, time, feature], raw_tensor=raw[b:b + 1, :n].clone())).raw
        torch.testing.assert_close(alone[0], batched[b])


# ---- TensorDict --------------------------------------------------------------------------------

def test_tensor_dict_filled_per_batch_returnns_way():
    time, out_time = Dim(Tensor("time", [batch_dim], dtype="int32")), Dim(None, name="out")
    feature, vocab = Dim(3, name="feature"), Dim(7, name="vocab")
    templates = {"data": Tensor("data", [batch_dim, time, feature], dtype="float32"),
                 "classes": Tensor("classes", [batch_dim, out_time], dtype="int32", sparse_dim=vocab)}
    extern = TensorDict(templates)
    assert extern["data"] is not templates["data"] and extern["data"].raw_tensor is None and "data" in extern
    assert list(extern) == ["data", "classes"] and len(extern) == 2 and extern.all_dims() == [batch_dim, time, feature, out_time]
    for lengths, out_lengths in (((4, 2), (1, 3)), ((1, 5, 3), (2, 2, 0))):
        raw = _padded(lengths, 3, PAD_NAN, seed=0)
        labels = torch.randint(7, (len(lengths), max(out_lengths)), dtype=torch.int32)
        extern.assign_from_raw_tensor_dict_({"data": raw, "data:size0": len(lengths), "data:size1": _lengths(lengths),
                                             "classes": labels, "classes:size1": _lengths(out_lengths)})
        data, classes = extern["data"], extern["classes"]
        assert data.raw is raw and classes.sparse_dim is vocab and batch_dim.get_dim_value() == len(lengths)
        assert time.lengths.raw.tolist() == list(lengths) and out_time.lengths.dims == (batch_dim,)
        assert out_time.lengths.raw.tolist() == list(out_lengths)
        back = extern.as_raw_tensor_dict(include_const_sizes=True)
        assert back["data"] is raw and back["data:size1"].tolist() == list(lengths) and back["data:size2"] == 3
        assert int(back["data:size0"]) == len(lengths) and back["classes:size1"].tolist() == list(out_lengths)
        extern.reset_content()
        assert data.raw_tensor is None and time.lengths is None and batch_dim.dyn_size_ext is None
    tpl = extern.copy_template()
    assert tpl["data"].raw_tensor is None and tpl["data"] is not extern["data"]
    with pytest.raises(KeyError, match="'data:size1' .* is not in the raw dict"):
        extern.assign_from_raw_tensor_dict_({"data": torch.zeros(1, 2, 3), "classes": torch.zeros(1, 2, dtype=torch.int32)})


def test_tensor_dict_assign_padded():
    time, feature = Dim(None, name="time"), Dim(3, name="feature")
    extern = TensorDict([Tensor("data", [batch_dim, time, feature], dtype="float32")])
    for lengths in ((4, 2, 2), (6,)):
        raw = _padded(lengths, 3, PAD_LARGE, seed=1)
        extern.assign_padded_({"data": raw}, lengths={time: torch.tensor(lengths)})  # batch: the raw's size
        x = extern["data"]
        assert batch_dim.get_dim_value() == len(lengths) and time.lengths.dims == (batch_dim,)
        torch.testing.assert_close(dt.reduce_sum(x, axis=time).raw,
                                   torch.stack([raw[b, :n].sum(0) for b, n in enumerate(lengths)]))
    extern.assign_padded_({"data": torch.zeros(2, 3, 3)}, lengths={time: torch.tensor([3, 1]), batch_dim: 2})
    with pytest.raises(KeyError, match=r"assign_padded_\(\): no raw for 'data'"):
        extern.assign_padded_({}, lengths={})
    t2 = Dim(None, name="t2")
    no_batch = TensorDict({"y": Tensor("y", [t2], dtype="float32")})
    with pytest.raises(ValueError, match=r"assign_padded_\(\): the lengths of dim .*'t2'.* are over no batch dim"):
        no_batch.assign_padded_({"y": torch.zeros(3)}, lengths={t2: torch.tensor([2])})


# ---- RETURNN gives the same ----------------------------------------------------------------------

def _rebinding_program(T):
    """Two batches on the same declared dims, as RETURNN's engine runs them (reset_eager between)."""
    time = T.Dim(T.Tensor("time", [T.batch_dim], dtype="int32"))
    feature = T.Dim(3, name="feature")
    out = []
    for lengths in ((4, 2, 3), (1, 6)):
        time.reset_eager()
        T.batch_dim.reset_eager()
        T.batch_dim.dyn_size_ext = T.Tensor("batch", [], dtype="int32",
                                            raw_tensor=torch.tensor(len(lengths), dtype=torch.int32))
        time.dyn_size_ext = T.Tensor("time", [T.batch_dim], dtype="int32", raw_tensor=_lengths(lengths))
        x = T.Tensor("x", [T.batch_dim, time, feature], dtype="float32",
                     raw_tensor=torch.arange(len(lengths) * max(lengths) * 3, dtype=torch.float32).view(len(lengths), -1, 3))
        out += [(time + 1).dyn_size_ext.raw_tensor.tolist(), time.ceildiv_right(2).dyn_size_ext.raw_tensor.tolist(),
                time.get_mask().raw_tensor.tolist(), time.get_dim_value(), int(T.batch_dim.get_dim_value()),
                x.copy_masked(0.0).raw_tensor.tolist()]
    return out


def test_rebinding_gives_what_returnn_gives():
    rf_out, dt_out = run_both(_rebinding_program)
    assert dt_out == rf_out


def test_fill_random_binds_and_fills():
    from dimtorch.rf.tensor.utils import tensor_dict_fill_random_numpy_
    time, feature, vocab = Dim(Tensor("time", [batch_dim], dtype="int32")), Dim(3, name="feature"), Dim(6, name="vocab")
    extern = TensorDict({"data": Tensor("data", [batch_dim, time, feature], dtype="float32"),
                         "labels": Tensor("labels", [batch_dim, time], dtype="int32", sparse_dim=vocab)})
    tensor_dict_fill_random_numpy_(extern, dyn_dim_max_sizes={time: 7}, dyn_dim_min_sizes={time: 1})
    lengths = time.lengths.raw
    assert batch_dim.get_dim_value() >= 2 and lengths.dtype == torch.int32 and int(lengths.max()) == 7
    assert int(lengths.min()) >= 1 and extern["data"].shape == (batch_dim.get_dim_value(), 7, 3)
    labels = extern["labels"].raw
    assert labels.dtype == torch.int32 and 0 <= int(labels.min()) and int(labels.max()) < 6
    extern.reset_content()
