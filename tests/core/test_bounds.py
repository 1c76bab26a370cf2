"""Calls past the core's fixed limits (its arrays of kMaxDims = 24 entries, int64 sizes) give a clear
error from every fast path, never undefined behaviour. Each case once wrote past an array or overflowed
a signed size in C++ (found by reading the core's entry points); CI also runs this file under
ASan + UBSan (scripts/test_sanitized.sh)."""
import pytest
import torch

import dimtorch as dt

BIG = 2**62  # sizes of expanded or meta tensors (no memory behind them) and of static dims


def _ones(n, dtype=torch.float32):
    return torch.ones([1] * n, dtype=dtype)


def _dims(n, prefix):
    return tuple(dt.Dim(1, name=f"{prefix}{i}") for i in range(n))


def masked_scatter_of_47_dims():
    mask_dims, rest, in_dim = _dims(24, "m"), _dims(23, "r"), dt.Dim(1, name="in")
    return dt.masked_scatter(dt.Tensor(_ones(24), (in_dim, *rest)), mask=dt.Tensor(_ones(24, torch.bool), mask_dims),
                             dims=mask_dims, in_dim=in_dim)


def matmul_of_46_dims():
    r = dt.Dim(1, name="r")
    return dt.matmul(dt.Tensor(_ones(24), (*_dims(23, "a"), r)), dt.Tensor(_ones(24), (r, *_dims(23, "b"))), reduce=r)


def split_into_sizes_past_int64():
    a = dt.Dim(4, name="a")
    return dt.split(dt.Tensor(torch.arange(4.0), (a,)), axis=a,
                    out_dims=[dt.Dim(2**63 - 1, name="p"), dt.Dim(2**63 - 1, name="q"), dt.Dim(6, name="r")])


def scatter_into_the_largest_dim():
    b = dt.Dim(1, name="b")
    s = dt.Dim(dt.Tensor(torch.tensor([2]), (b,)), name="s")
    return dt.scatter(dt.Tensor(torch.ones(1, 2), (b, s)), indices=dt.Tensor(torch.zeros(1, 2, dtype=torch.int64), (b, s)),
                      indices_dim=s, out_dim=dt.Dim(2**63 - 1, name="out"))


def ctc_durations_of_the_largest_targets():
    b, t = dt.Dim(1, name="b"), dt.Dim(3, name="t")
    targets = dt.Dim(dt.Tensor(torch.tensor([2**62 - 1]), (b,)), name="targets")
    return dt.ctc_durations_from_path(path=dt.Tensor(torch.zeros(1, 3, dtype=torch.int64, device="meta"), (b, t)),
                                      path_spatial_dim=t, blank_index=0, targets_spatial_dim=targets)


def concat_past_int64():
    d = dt.Dim(BIG, name="d")
    x = dt.Tensor(torch.zeros(()).expand(BIG), (d,))
    return dt.concat((x, d), (x, d))


def _empty_with_huge_sizes():
    z, p, q = dt.Dim(0, name="z"), dt.Dim(BIG, name="p"), dt.Dim(BIG, name="q")
    return dt.Tensor(torch.zeros(0, 1, 1).expand(0, BIG, BIG), (z, p, q)), p, q


def merge_dims_past_int64():
    x, p, q = _empty_with_huge_sizes()
    return dt.merge_dims(x, dims=(p, q))


def reshape_past_int64():
    x, p, q = _empty_with_huge_sizes()
    return dt.reshape(x, (p, q), (dt.Dim(0, name="flat"),))


def matmul_group_past_int64():
    x, p, q = _empty_with_huge_sizes()
    y = dt.Tensor(x.raw, (dt.Dim(0, name="w"), p, q))
    return dt.matmul(x, y, reduce=(p, q))


def derivation_with_a_negative_factor():
    d = object.__new__(dt.Dim)
    lengths = dt.Tensor(torch.tensor([3]), (dt.Dim(1, name="b"),))
    d.derivation = ("ceildiv", dt.Dim(lengths, name="t"), None, -2**63)


CASES = {
    "masked_scatter of 47 dims": (masked_scatter_of_47_dims, ValueError, r"at most 24 dims are supported"),
    "matmul of 46 dims": (matmul_of_46_dims, ValueError, r"dimtorch\.matmul\(\): at most 24 dims are supported, the "
                                                         r"result would have 46"),
    "split into sizes past int64": (split_into_sizes_past_int64, ValueError, r"dimtorch\.split\(\): the sizes of out_dims"),
    "scatter into the largest dim": (scatter_into_the_largest_dim, (TypeError, OverflowError, RuntimeError),
                                     r"dimtorch\.scatter\(\)"),
    "ctc durations of the largest targets": (ctc_durations_of_the_largest_targets, (TypeError, OverflowError, RuntimeError),
                                             r"dimtorch\.ctc_durations_from_path\(\)"),
    "concat past int64": (concat_past_int64, OverflowError, r"overflows \(a size is at most 2\*\*63 - 1\)"),
    "merge_dims past int64": (merge_dims_past_int64, OverflowError, r"overflows"),
    "reshape past int64": (reshape_past_int64, ValueError, r"dimtorch\.reshape\(\): in_dims .* do not fit out_dims"),
    "matmul group past int64": (matmul_group_past_int64, OverflowError, r"dimtorch\.matmul\(\): a group of merged sizes"),
    "derivation with a negative factor": (derivation_with_a_negative_factor, ValueError, r"bad derivation"),
}


@pytest.mark.parametrize("case", CASES)
def test_past_the_core_limits_is_an_error(case):
    call, error, message = CASES[case]
    with pytest.raises(error, match=message):
        call()


def test_lengths_of_an_empty_tensor_with_huge_sizes():
    """The host min/max of lengths whose tensor is empty: 0 (the product of its sizes overflowed first)."""
    lengths = dt.Tensor(torch.zeros(1, 1, 0, dtype=torch.int64).expand(BIG, 2, 0),
                        (dt.Dim(BIG, name="p"), dt.Dim(2, name="q"), dt.Dim(0, name="z")))
    assert dt.Dim(lengths, name="t").get_max_size() == 0
