"""The ops added for RETURNN-frontend coverage whose output size does not depend on data read nothing from the device.

They run on the "meta" device, where any read of device values (.item(), nonzero, a blocking copy back)
raises, under bench/check_syncs.py's CopyCounter: no host-to-device copy may be blocking. masked_select,
masked_select_nested and repeat read data by necessity (their docstrings say so) and are not here, except
masked_select with a given out_dim, which reads nothing.
"""
import pytest
import torch

import dimtorch as dt
from sync_checks import copy_counter


def meta(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype, device="meta")


OPS = {
    "squared_difference": lambda x, b, t, f: dt.squared_difference(x, x * 2.0),
    "log_add_exp": lambda x, b, t, f: dt.log_add_exp(x, x),
    "log_sigmoid": lambda x, b, t, f: dt.log_sigmoid(x),
    "reshape": lambda x, b, t, f: dt.reshape(x, (f,), (dt.Dim(2, name="h"), dt.Dim(2, name="d"))),
    "replace_dim_v2": lambda x, b, t, f: dt.replace_dim_v2(x, in_dim=t, out_dim=t + 2),
    "search_sorted": lambda x, b, t, f: dt.search_sorted(dt.Tensor(meta(3, 5), (b, t)), dt.Tensor(meta(3, 4), (b, f)),
                                                         axis=t),
    "scatter modes": lambda x, b, t, f: [dt.scatter(x, indices=dt.Tensor(meta(3, 5, dtype=torch.int64), (b, t),
                                                                          sparse_dim=dt.Dim(6, name="v")),
                                                    indices_dim=t, mode=mode, fill_value=1.0)
                                         for mode in ("mean", "max", "logmeanexp", "argmax")],
    "gather clip_to_valid": lambda x, b, t, f: dt.gather(
        x, indices=dt.Tensor(meta(3, 2, dtype=torch.int64), (b, dt.Dim(2, name="k")), sparse_dim=t), axis=t,
        clip_to_valid=True),
    "slice start Tensor, size": lambda x, b, t, f: dt.slice(x, axis=t, start=dt.Tensor(meta(3, dtype=torch.int64), (b,)),
                                                            size=dt.Dim(2, name="w")),
    "slice size Dim": lambda x, b, t, f: dt.slice(x, axis=t, start=0, size=t - 1),
    "pad Tensor value": lambda x, b, t, f: dt.pad(x, axes=t, padding=(1, 1), value=dt.Tensor(meta(3), (b,))),
    "reverse_sequence no dynamic": lambda x, b, t, f: dt.reverse_sequence(x, axis=t, handle_dynamic_dims=False),
    "masked_scatter": lambda x, b, t, f: dt.masked_scatter(
        dt.Tensor(meta(3, 4, 4), (b, t - 1, f)), mask=dt.Tensor(meta(3, 5, dtype=torch.bool), (b, t)), dims=(t,),
        in_dim=t - 1),
    "masked_select given out_dim": lambda x, b, t, f: dt.masked_select(
        x, mask=dt.Tensor(meta(3, 5, dtype=torch.bool), (b, t)), dims=(t,), out_dim=t - 1),
    "pack_padded per row": lambda x, b, t, f: dt.pack_padded(x, dims=(t,)),
    "label_smoothed_log_prob_gradient": lambda x, b, t, f: dt.label_smoothed_log_prob_gradient(
        x, 0.1, axis=f, exclude_labels=[0]),
}


@pytest.mark.parametrize("name", list(OPS))
def test_no_device_reads_and_no_blocking_copies(name):
    b = dt.Dim(None, name="batch")
    t = dt.Dim(dt.Tensor(torch.tensor([5, 3, 1]), (b,)), name="time")
    f = dt.Dim(4, name="f")
    x = dt.Tensor(torch.randn(3, 5, 4, device="meta"), (b, t, f), feature_dim=f)
    with copy_counter() as c:
        OPS[name](x, b, t, f)
    assert c.blocking == 0, f"{name}: {c.blocking} blocking host-to-device copies"
