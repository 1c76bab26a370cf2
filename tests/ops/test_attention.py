"""Tests of python/dimtorch/ops/attention.py (dt.dot_attention) against attention written out positionally
(energies, masked softmax, weighted sum), forward and backward, on NaN/1e30-padded batches and per
sequence alone: multi-head, cross, self (axis in the query), causal, single step, broadcast dims,
dropout; errors name the call."""
import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence

H, DK, DV = 2, 4, 3


def _dims(lengths, kv_lengths=None):
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    kv = time if kv_lengths is None else dt.Dim(dt.Tensor(torch.tensor(kv_lengths), (batch,)), name="kv")
    return batch, time, kv, dt.Dim(H, name="heads"), dt.Dim(DK, name="key"), dt.Dim(DV, name="value")


def _padded(raw, dims, pad, seed=0):
    """raw with every dynamic dim's padding set to pad."""
    from helpers import valid_mask
    raw = raw.clone()
    raw[~valid_mask(dims, raw.shape).expand(raw.shape)] = pad
    return dt.Tensor(raw, dims)


def _oracle(q, k, v, key_valid, causal=False, scale=None, q_valid=None):
    """q (..., L, E), k (..., S, E), v (..., S, Ev); key_valid (..., S), q_valid (..., L) bool:
    softmax(q k^T) v by hand, padding zeroed first."""
    if q_valid is not None:
        q = torch.where(q_valid[..., None], q, 0.0)
    k = torch.where(key_valid[..., None], k, 0.0)
    v = torch.where(key_valid[..., None], v, 0.0)
    e = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    allowed = key_valid[..., None, :]
    if causal:
        allowed = allowed & torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    e = e.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(e, dim=-1).nan_to_num(0.0)
    return torch.matmul(w, v)


def _key_valid(lengths, s):
    return torch.arange(s)[None, :] < torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_cross_attention_multi_head(pad):
    q_len, kv_len = [4, 2, 3], [5, 0, 2]
    batch, time, kv, heads, key, value = _dims(q_len, kv_len)
    g = torch.Generator().manual_seed(0)
    q = _padded(torch.randn(3, H, 4, DK, generator=g), (batch, heads, time, key), pad)
    k = _padded(torch.randn(3, 5, H, DK, generator=g), (batch, kv, heads, key), pad)
    v = _padded(torch.randn(H, 3, 5, DV, generator=g), (heads, batch, kv, value), pad)
    valid = _key_valid(kv_len, 5)[:, None]

    def ref(q, k, v):
        return _oracle(q, k.transpose(1, 2), v.permute(1, 0, 2, 3), valid, q_valid=_key_valid(q_len, 4)[:, None])

    check_against_torch(lambda q, k, v: dt.dot_attention(q, k, v, key_dim=key, axis=kv), ref, [q, k, v],
                        out_dims=(batch, heads, time, value), expect_dims=(batch, heads, time, value),
                        atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_axis_in_query(causal):
    lengths = [5, 3, 1]
    batch, time, _, heads, key, value = _dims(lengths)
    g = torch.Generator().manual_seed(1)
    q = _padded(torch.randn(3, 5, H, DK, generator=g), (batch, time, heads, key), PAD_NAN)
    k = _padded(torch.randn(3, 5, H, DK, generator=g), (batch, time, heads, key), PAD_NAN)
    v = _padded(torch.randn(3, 5, H, DV, generator=g), (batch, time, heads, value), PAD_NAN)
    valid = _key_valid(lengths, 5)[:, None]

    def ref(q, k, v):
        return _oracle(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), valid, causal=causal, q_valid=valid)

    causal_dim = time if causal else None
    check_against_torch(lambda q, k, v: dt.dot_attention(q, k, v, key_dim=key, axis=time,
                                                         causal_query_spatial_dim=causal_dim),
                        ref, [q, k, v], out_dims=(batch, heads, time, value), atol=1e-5, rtol=1e-4)

    def fn(x, dim_map):
        t = dim_map(time)
        qq = dt.Tensor(x.raw[..., :DK].unflatten(-1, (1, DK)).expand(-1, -1, H, -1), (x.dims[0], t, heads, key))
        vv = dt.Tensor(x.raw[..., :DV].unflatten(-1, (1, DV)).expand(-1, -1, H, -1), (x.dims[0], t, heads, value))
        return dt.dot_attention(qq, qq, vv, key_dim=key, axis=t, causal_query_spatial_dim=t if causal else None)

    x = _padded(torch.randn(3, 5, DK, generator=g), (batch, time, dt.Dim(DK, name="f")), PAD_NAN)
    check_batch_independence(fn, x, batch, time, atol=1e-5, rtol=1e-4)


def test_causal_with_a_separate_query_dim():
    lengths = [4, 2]
    batch, time, _, heads, key, value = _dims(lengths)
    qt = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="qtime")
    g = torch.Generator().manual_seed(2)
    q = _padded(torch.randn(2, 4, DK, generator=g), (batch, qt, key), PAD_NAN)
    k = _padded(torch.randn(2, 4, DK, generator=g), (batch, time, key), PAD_NAN)
    v = _padded(torch.randn(2, 4, DV, generator=g), (batch, time, value), PAD_NAN)
    check_against_torch(lambda q, k, v: dt.dot_attention(q, k, v, key_dim=key, axis=time, causal_query_spatial_dim=qt),
                        lambda q, k, v: _oracle(q, k, v, _key_valid(lengths, 4), causal=True,
                                                q_valid=_key_valid(lengths, 4)), [q, k, v],
                        out_dims=(batch, qt, value), atol=1e-5, rtol=1e-4)


def test_single_step_query_broadcast_and_merged_query_dims():
    kv_len = [5, 3]
    batch, _, kv, heads, key, value = _dims([1, 1], kv_len)
    beam = dt.Dim(3, name="beam")
    g = torch.Generator().manual_seed(3)
    # one decoder step per (batch, beam); the encoder's keys lack the beam dim
    q = dt.Tensor(torch.randn(2, 3, H, DK, generator=g), (batch, beam, heads, key))
    k = _padded(torch.randn(2, H, 5, DK, generator=g), (batch, heads, kv, key), PAD_NAN)
    v = _padded(torch.randn(2, H, 5, DV, generator=g), (batch, heads, kv, value), PAD_NAN)
    valid = _key_valid(kv_len, 5)

    def ref(q, k, v):  # (batch, heads, beam, value): beam is the query's own dim (one query per beam entry)
        return _oracle(q.transpose(1, 2), k, v, valid[:, None])

    check_against_torch(lambda q, k, v: dt.dot_attention(q, k, v, key_dim=key, axis=kv), ref, [q, k, v],
                        out_dims=(batch, heads, beam, value), expect_dims=(batch, heads, beam, value),
                        atol=1e-5, rtol=1e-4)
    # two query-only dims are merged for the call and split again
    t2 = dt.Dim(2, name="t2")
    q2 = dt.Tensor(torch.randn(2, 3, 2, DK, generator=g), (batch, beam, t2, key))
    y = dt.dot_attention(q2, dt.Tensor(k.raw[:, 0], (batch, kv, key)), dt.Tensor(v.raw[:, 0], (batch, kv, value)),
                         key_dim=key, axis=kv)
    assert y.dims == (batch, beam, t2, value)
    expected = _oracle(q2.raw.flatten(1, 2), k.raw[:, 0], v.raw[:, 0], valid).unflatten(1, (3, 2))
    torch.testing.assert_close(y.raw, expected, atol=1e-5, rtol=1e-4)
    # no query dim at all: one query per (batch, heads)
    q0 = dt.Tensor(q.raw[:, 0], (batch, heads, key))
    y0 = dt.dot_attention(q0, k, v, key_dim=key, axis=kv)
    assert y0.dims == (batch, heads, value)
    torch.testing.assert_close(y0.raw, _oracle(q0.raw[..., None, :], k.raw, v.raw, valid[:, None])[..., 0, :],
                               atol=1e-5, rtol=1e-4)


def test_values_with_key_dim_as_feature_and_scale():
    kv_len = [3, 2]
    batch, time, kv, _, key, _ = _dims([2, 2], kv_len)
    g = torch.Generator().manual_seed(4)
    q = dt.Tensor(torch.randn(2, 2, DK, generator=g), (batch, time, key))
    k = _padded(torch.randn(2, 3, DK, generator=g), (batch, kv, key), PAD_LARGE)
    y = dt.dot_attention(q, k, k, key_dim=key, axis=kv, scale=0.3)
    assert y.dims == (batch, time, key)
    torch.testing.assert_close(y.raw, _oracle(q.raw, k.raw, k.raw, _key_valid(kv_len, 3), scale=0.3),
                               atol=1e-5, rtol=1e-4)


def test_dropout_training_flag_and_broadcast():
    batch, time, kv, heads, key, value = _dims([3, 3], [4, 4])
    g = torch.Generator().manual_seed(5)
    q = dt.Tensor(torch.randn(2, H, 3, DK, generator=g), (batch, heads, time, key))
    k = dt.Tensor(torch.randn(2, H, 4, DK, generator=g), (batch, heads, kv, key))
    # values: one-hot over the key positions, so the output shows each key's attention weight
    pos = dt.Dim(4, name="pos")
    v = dt.Tensor(torch.eye(4).expand(2, H, 4, 4).contiguous(), (batch, heads, kv, pos))
    w = dt.dot_attention(q, k, v, key_dim=key, axis=kv, att_dropout=0.5, training=False)
    torch.testing.assert_close(w.raw.sum(-1), torch.ones(2, H, 3))
    assert torch.equal(dt.dot_attention(q, k, v, key_dim=key, axis=kv, att_dropout=1.0).raw, torch.zeros(2, H, 3, 4))
    torch.manual_seed(0)
    d = dt.dot_attention(q, k, v, key_dim=key, axis=kv, att_dropout=0.5, att_dropout_broadcast=True)
    ratio = d.raw / w.raw  # 0 or 2 per key position, the same for every batch entry, head and query
    kept = ratio[0, 0, 0]
    assert set(torch.round(kept).tolist()) <= {0.0, 2.0}
    torch.testing.assert_close(ratio, kept.expand_as(ratio), atol=1e-5, rtol=1e-4)


def test_length_zero_gives_zero_and_finite_gradients():
    batch, time, kv, heads, key, value = _dims([2, 2], [3, 0])
    g = torch.Generator().manual_seed(6)
    q = torch.randn(2, 2, DK, generator=g, requires_grad=True)
    k = torch.full((2, 3, DK), float("nan"))
    k[0] = torch.randn(3, DK, generator=g)
    k.requires_grad_(True)
    v = torch.randn(2, 3, DV, generator=g, requires_grad=True)
    y = dt.dot_attention(dt.Tensor(q, (batch, time, key)), dt.Tensor(k, (batch, kv, key)),
                         dt.Tensor(v, (batch, kv, value)), key_dim=key, axis=kv)
    assert torch.equal(y.raw[1], torch.zeros(2, DV))
    y.raw.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()


def test_dot_attention_errors():
    batch, time, kv, heads, key, value = _dims([2, 1], [3, 2])
    q = dt.Tensor(torch.zeros(2, 2, DK), (batch, time, key))
    k = dt.Tensor(torch.zeros(2, 3, DK), (batch, kv, key))
    v = dt.Tensor(torch.zeros(2, 3, DV), (batch, kv, value))
    with pytest.raises(ValueError, match=r"dimtorch\.dot_attention\(\): key_dim 'value'\(3\) is not a dim of query"):
        dt.dot_attention(q, k, v, key_dim=value, axis=kv)
    with pytest.raises(ValueError, match=r"dot_attention\(\): axis 'time'.* is not a dim of keys"):
        dt.dot_attention(q, k, v, key_dim=key, axis=time)
    with pytest.raises(TypeError, match=r"dot_attention\(\): keys must be a dimtorch.Tensor"):
        dt.dot_attention(q, k.raw, v, key_dim=key, axis=kv)
    with pytest.raises(TypeError, match=r"dot_attention\(\): key_dim must be a Dim"):
        dt.dot_attention(q, k, v, key_dim=4, axis=kv)
    with pytest.raises(ValueError, match=r"dot_attention\(\): att_dropout must be a float in \[0, 1\]"):
        dt.dot_attention(q, k, v, key_dim=key, axis=kv, att_dropout=1.5)
    with pytest.raises(ValueError, match=r"dot_attention\(\): causal_query_spatial_dim 'heads'.* not a dim of query"):
        dt.dot_attention(q, k, v, key_dim=key, axis=kv, causal_query_spatial_dim=heads)
    other = dt.Dim(None, name="other")
    k_other = dt.Tensor(torch.zeros(3, DK), (kv, key))
    v_other = dt.Tensor(torch.zeros(3, DV), (kv, value))
    q_other = dt.Tensor(torch.zeros(2, DK), (other, key))
    with pytest.raises(ValueError, match=r"dot_attention\(\): the lengths of axis 'kv'.* vary over \('batch'"):
        dt.dot_attention(q_other, k_other, v_other, key_dim=key, axis=kv)
    two = dt.Dim(2, name="two")
    with pytest.raises(ValueError, match=r"dot_attention\(\): with causal_query_spatial_dim 'time'.* only dim"):
        dt.dot_attention(dt.Tensor(torch.zeros(2, 2, 2, DK), (batch, time, two, key)), k, v, key_dim=key, axis=kv,
                         causal_query_spatial_dim=time)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_fast_path_against_the_definition(pad):
    """dot_attention's C++ fast path (query, keys, values already in the plan's order, no causal dim, no dropout)
    against the definition: cross and self attention, dynamic or static query and key dims, values over key_dim
    or their own dim, batch dims or none, scale, float64; values, dims, markers and gradients the same (check),
    each sequence alone as in the batch; the calls it takes never run the definition, the others go to it."""
    from definition_checks import check
    from fast_path_checks import definition_calls
    from dimtorch.ops import attention as _attention
    batch, time, kv, heads, key, value = _dims([4, 1, 3], [2, 5, 0])
    g = torch.Generator().manual_seed(1)
    q = _padded(torch.randn(3, H, 4, DK, generator=g), (batch, heads, time, key), pad)
    k = _padded(torch.randn(3, H, 5, DK, generator=g), (batch, heads, kv, key), pad)
    v = _padded(torch.randn(3, H, 5, DV, generator=g), (batch, heads, kv, value), pad)
    v_key = _padded(torch.randn(3, H, 5, DK, generator=g), (batch, heads, kv, key), pad)
    v = dt.Tensor(v.raw, v.dims, feature_dim=value)
    ks = _padded(torch.randn(3, H, 4, DK, generator=g), (batch, heads, time, key), pad)  # self attention
    vs = _padded(torch.randn(3, H, 4, DV, generator=g), (batch, heads, time, value), pad)
    static_t = dt.Dim(5, name="static")
    k_static = dt.Tensor(torch.randn(3, H, 5, DK, generator=g), (batch, heads, static_t, key))
    v_static = dt.Tensor(torch.randn(3, H, 5, DV, generator=g), (batch, heads, static_t, value))
    q_flat = dt.Tensor(torch.randn(4, DK, generator=g), (dt.Dim(4, name="tq"), key))
    taken = [
        ((q, k, v), dict(key_dim=key, axis=kv)),
        ((q, k, v_key), dict(key_dim=key, axis=kv)),
        ((q, ks, vs), dict(key_dim=key, axis=time)),
        ((q, k, v), dict(key_dim=key, axis=kv, scale=0.5, att_dropout=0.3, training=False)),
        ((q, k_static, v_static), dict(key_dim=key, axis=static_t, att_dropout=0)),
        ((q_flat, dt.Tensor(k_static.raw[0, 0], (static_t, key)), dt.Tensor(v_static.raw[0, 0], (static_t, value))),
         dict(key_dim=key, axis=static_t)),
        ((dt.cast(q, "float64"), dt.cast(k, "float64"), dt.cast(v, "float64")), dict(key_dim=key, axis=kv)),
    ]
    for args, kwargs in taken:
        check(dt.dot_attention, *args, **kwargs)
        assert definition_calls(lambda: dt.dot_attention(*args, **kwargs), _attention.dot_attention) == 0, kwargs
    # each sequence alone (static dims of its own lengths) gives its part of the batch's result
    out = dt.dot_attention(q, k, v, key_dim=key, axis=kv)
    for b, (n, m) in enumerate(zip([4, 1, 3], [2, 5, 0])):
        tn, km = dt.Dim(n, name="tn"), dt.Dim(m, name="km")
        alone = dt.dot_attention(dt.Tensor(q.raw[b, :, :n], (heads, tn, key)), dt.Tensor(k.raw[b, :, :m], (heads, km, key)),
                                 dt.Tensor(v.raw[b, :, :m], (heads, km, value)), key_dim=key, axis=km)
        torch.testing.assert_close(alone.raw, out.raw[b, :, :n])
    handed = [
        ((q, k, v), dict(key_dim=key, axis=kv, att_dropout=0.2)),  # dropout while training
        ((q, ks, vs), dict(key_dim=key, axis=time, causal_query_spatial_dim=time)),
        ((q, k.copy_transpose((heads, batch, kv, key)), v), dict(key_dim=key, axis=kv)),  # another layout
        ((dt.Tensor(q.raw, q.dims), k, v), dict(key_dim=key, axis=kv, training=1)),
        ((q, k, dt.cast(v, "float64")), dict(key_dim=key, axis=kv)),  # torch refuses: the definition's error
    ]
    for args, kwargs in handed:
        assert definition_calls(lambda: _call_quietly(args, kwargs), _attention.dot_attention) == 1, kwargs
    check(dt.dot_attention, q, k.copy_transpose((heads, batch, kv, key)), v, key_dim=key, axis=kv)
    with pytest.raises(RuntimeError, match=r"^dimtorch\.dot_attention\(\): "):
        dt.dot_attention(q, k, dt.cast(v, "float64"), key_dim=key, axis=kv)


def _call_quietly(args, kwargs):
    try:
        dt.dot_attention(*args, **kwargs)
    except RuntimeError:
        pass
