"""The ops composed in Python (conv, pool, slicing, sort, scatter, packing) read nothing from the device.

They run on the "meta" device, where any read of device values (.item(), nonzero, a blocking
copy back) raises, under bench/check_syncs.py's CopyCounter, which sees every host-to-device copy
made through torch.Tensor.to/copy_/cuda: none of them may be blocking.
"""
import torch

import dimtorch as dt
from sync_checks import copy_counter  # noqa: F401


OPS = {
    "conv": lambda x, b, t, f, o, k: dt.conv(x, dt.Tensor(torch.randn(2, 4, 3, device="meta"), (o, f, k)), in_dim=f,
                                             out_dim=o, in_spatial_dims=[t], filter_size=[k], strides=2,
                                             padding="same"),
    "transposed_conv": lambda x, b, t, f, o, k: dt.transposed_conv(
        x, dt.Tensor(torch.randn(4, 2, 3, device="meta"), (f, o, k)), in_dim=f, out_dim=o, in_spatial_dims=[t],
        filter_size=[k], strides=2),
    "pool max": lambda x, b, t, f, o, k: dt.pool(x, mode="max", pool_size=2, padding="same", in_spatial_dims=[t]),
    "pool avg": lambda x, b, t, f, o, k: dt.pool(x, mode="avg", pool_size=2, padding="same", in_spatial_dims=[t]),
    "slice": lambda x, b, t, f, o, k: dt.slice(x, axis=t, start=1, end=3),
    "shift_left": lambda x, b, t, f, o, k: dt.shift_left(x, axis=t),
    "reverse_sequence": lambda x, b, t, f, o, k: dt.reverse_sequence(x, axis=t),
    "top_k": lambda x, b, t, f, o, k: dt.top_k(x, axis=t, k=2),
    "sort": lambda x, b, t, f, o, k: dt.sort(x, axis=t),
    "cumsum": lambda x, b, t, f, o, k: dt.cumsum(x, axis=t),
    "scatter": lambda x, b, t, f, o, k: dt.scatter(
        x, indices=dt.Tensor(torch.zeros(3, 5, dtype=torch.int64, device="meta"), (b, t), sparse_dim=o),
        indices_dim=t),
    "pack_padded": lambda x, b, t, f, o, k: dt.pack_padded(x, dims=(b, t)),
    "unpack_padded": lambda x, b, t, f, o, k: unpack(b, t, f),
}


def unpack(b, t, f):
    p = dt.Dim(9, name="pack")
    return dt.unpack_padded(dt.Tensor(torch.randn(9, 4, device="meta"), (p, f)), dims=(b, t), in_dim=p)


def test_no_device_reads_and_no_blocking_copies():
    for name, op in OPS.items():
        b = dt.Dim(None, name="batch")
        t = dt.Dim(dt.Tensor(torch.tensor([5, 3, 1]), (b,)), name="time")
        f, o, k = dt.Dim(4, name="f"), dt.Dim(2, name="o"), dt.Dim(3, name="k")
        x = dt.Tensor(torch.randn(3, 5, 4, device="meta"), (b, t, f))
        with copy_counter() as c:
            op(x, b, t, f, o, k)
        assert c.blocking == 0, f"{name}: {c.blocking} blocking host-to-device copies"
        assert c.copies <= 1, f"{name}: {c.copies} host-to-device copies (at most the lengths, once)"
