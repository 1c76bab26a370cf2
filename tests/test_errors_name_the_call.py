"""Bad input anywhere gives a Python exception whose message names the dimtorch call, also where the
error comes from torch (its messages name no dimtorch call): pinned cases, then a fuzz of the public
ops with odd arguments."""
from __future__ import annotations

import pytest
import torch

import dimtorch as dt

from helpers import make_padded_batch


@pytest.fixture
def batch():
    return make_padded_batch((3, 2, 0), feature=4)


def test_torch_errors_get_the_call_in_front(batch):
    x = batch.x
    cases = [
        (lambda: x & x, NotImplementedError, r"^dimtorch.Tensor.__and__\(\): .*bitwise_and"),
        (lambda: dt.where(x, x, 0.0), RuntimeError, r"^dimtorch.where\(\): .*boolean"),
        (lambda: dt.full((batch.feature,), "a"), TypeError, r"^dimtorch.full\(\): .*fill_value"),
        (lambda: dt.cast(x, "int64") + 2**70, OverflowError, r"^dimtorch.Tensor.__add__\(\)"),
        (lambda: dt.reduce_mean(dt.cast(x, "int64"), axis=batch.feature), RuntimeError, r"^dimtorch.reduce_mean\(\)"),
        (lambda: batch.time + 2**70, OverflowError, r"^dimtorch dim math: the int \d+ is out of range"),
        (lambda: dt.linear(dt.cast(x, "int64"), dt.Tensor(torch.randn(3, 4), (dt.Dim(3, name="o"), batch.feature))),
         RuntimeError, r"^dimtorch.linear\(\): .*dtype"),
        (lambda: dt.softmax(dt.cast(x, "int64"), axis=batch.feature),
         NotImplementedError, r"^dimtorch.softmax\(\): .*Long"),
        (lambda: dt.layer_norm(dt.cast(x, "int64"), axis=batch.feature, eps=1e-5),
         NotImplementedError, r"^dimtorch.layer_norm\(\): .*Long"),
        (lambda: dt.pad(x, axes=batch.feature, padding=(1, 1), value="a"), TypeError, r"^dimtorch.pad\(\): .*value"),
        (lambda: dt.convert_to_tensor({}),
         RuntimeError, r"^dimtorch.convert_to_tensor\(\): cannot make a tensor of dict"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind, match=message):
            call()


def test_flags_that_are_tensors_are_refused(batch):
    x, flag = batch.x, torch.tensor(True)
    cases = [
        (lambda: dt.reduce_sum(x, axis=batch.time, use_mask=flag), r"dimtorch.reduce_sum\(\): use_mask must be a bool"),
        (lambda: dt.moments(x, axis=batch.time, use_mask=flag), r"dimtorch.moments\(\): use_mask must be a bool"),
        (lambda: dt.softmax(x, axis=batch.time, use_mask=flag), r"dimtorch.softmax\(\): use_mask must be a bool"),
        (lambda: dt.combine(x, x, "add", allow_broadcast_all_sources=x),
         r"dimtorch.combine\(\): allow_broadcast_all_sources must be a bool"),
        (lambda: dt.dropout(x, 0.5, training=flag), r"dimtorch.dropout\(\): training must be a bool"),
    ]
    for call, message in cases:
        with pytest.raises(TypeError, match=message):
            call()


def test_devices_and_dims_of_sequence_mask(batch):
    with pytest.raises(ValueError, match=r"dimtorch.sequence_mask\(\): device must be a torch.device or a device name"):
        dt.sequence_mask((batch.batch, batch.time), device="nowhere")
    with pytest.raises(TypeError,
                       match=r"dimtorch.sequence_mask\(\): dims must be a Dim or a sequence of Dims, got int"):
        dt.sequence_mask(3)
    with pytest.raises(ValueError, match=r"dimtorch.Dim.get_mask\(\): device must be"):
        batch.time.get_mask(device=1.5)


def test_fuzz_public_ops_with_odd_arguments(batch):
    b = batch
    vocab, out = dt.Dim(5, name="vocab"), dt.Dim(3, name="out")
    labels = dt.Tensor(torch.zeros(3, 3, dtype=torch.int64), (b.batch, b.time), sparse_dim=vocab)
    weight = dt.Tensor(torch.randn(4, 3), (b.feature, out))
    odd = [None, 0, -1, 1, 2**70, True, 1.5, "time", (), [], (b.time,), [b.batch, b.time], (b.time, b.time),
           b.batch, b.time, b.feature, vocab, out, b.x, labels, weight, b.x.raw, dt.Tensor(torch.zeros(()), ()),
           [b.x, b.x], float("nan"), b.time - 1, dt.Dim(None, name="n"), {}, (b.batch, b.time, b.feature), "mean"]
    calls = [
        (dt.reduce_sum, ("axis", "use_mask")), (dt.reduce_mean, ("axis", "use_mask")), (dt.reduce_max, ("axis",)),
        (dt.reduce_argmax, ("axis",)), (dt.softmax, ("axis", "use_mask")), (dt.log_softmax, ("axis",)),
        (dt.matmul, ("b", "reduce", "use_mask")), (dt.linear, ("weight", "bias")),
        (dt.layer_norm, ("axis", "weight", "bias", "eps")), (dt.rms_norm, ("axis", "weight", "eps")),
        (dt.moments, ("axis", "use_mask")),
        (dt.batch_norm, ("axis", "running_mean", "running_var", "training", "momentum", "eps")),
        (dt.dropout, ("p", "axis", "training")), (dt.sequence_mask, ("device",)), (dt.concat, ()),
        (dt.conv, ("filter", "in_dim", "out_dim", "in_spatial_dims", "filter_size", "strides", "padding")),
        (dt.transposed_conv, ("filter", "in_dim", "out_dim", "in_spatial_dims", "filter_size", "strides")),
        (dt.pool, ("mode", "pool_size", "in_spatial_dims", "strides", "padding")),
        (dt.cross_entropy, ("estimated", "target", "axis", "estimated_type")),
        (dt.pad, ("axes", "padding", "value", "mode")), (dt.merge_dims, ("dims", "out_dim")),
        (dt.split_dims, ("axis", "dims")), (dt.gather, ("indices", "axis")), (dt.cumsum, ("axis",)),
        (dt.unstack, ("axis",)), (dt.unpack_padded, ("dims", "in_dim")), (dt.sort, ("axis",)),
        (dt.expand_dim, ("dim",)), (dt.squeeze, ("axis",)), (dt.replace_dim, ("in_dim", "out_dim")),
        (dt.where, ()), (dt.combine, ()), (dt.cast, ()), (dt.zeros, ()), (dt.full, ()), (dt.range_over_dim, ()),
        (dt.convert_to_tensor, ()), (dt.ceildiv, ()), (dt.clip, ()), (dt.maximum, ()), (dt.dot, ()),
    ]
    g = torch.Generator().manual_seed(0)
    for fn, names in calls:
        max_positional = 1 if names else 3
        for _ in range(150):
            n_pos = int(torch.randint(1, max_positional + 1, (), generator=g))
            pick = torch.randint(len(odd), (len(names) + n_pos,), generator=g).tolist()
            args = [odd[i] for i in pick[:n_pos]]
            kwargs = {n: odd[i] for n, i in zip(names, pick[n_pos:]) if torch.rand((), generator=g) < 0.8}
            try:
                fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001  (any type, as long as it names the call)
                message = str(e)
                assert isinstance(e, (TypeError, ValueError, RuntimeError, IndexError, OverflowError,
                                      NotImplementedError)), (fn, args, kwargs, e)
                assert ("dimtorch" in message or "required" in message or "positional argument" in message
                        or "unexpected keyword" in message), (fn, args, kwargs, e)


def test_module_functions_stay_plain_builtins():
    # Every C++ op is registered through one wrapper that names torch's errors: the functions are
    # still module-level builtins (their repr, pickling by name).
    import pickle
    for fn in (dt.reduce_sum, dt.relu, dt.slice, dt.ceildiv, dt.where):
        assert repr(fn) == f"<built-in function {fn.__name__}>"
        assert pickle.loads(pickle.dumps(fn)) is fn
