"""rf.dtype: default dtypes. The float default is torch's default dtype (what dimtorch's ops make when
given none); the int and index default is int64 (dimtorch's indices; RETURNN frontend's is int32)."""
from __future__ import annotations

from contextlib import contextmanager

import torch

__all__ = ["get_default_float_dtype", "set_default_float_dtype", "set_default_float_dtype_ctx",
           "get_default_int_dtype", "get_default_array_index_dtype", "is_float_dtype"]

_int_dtype = "int64"


def get_default_float_dtype() -> str:
    """torch's default dtype, as a name ("float32" unless changed)."""
    return str(torch.get_default_dtype()).replace("torch.", "")


def set_default_float_dtype(dtype: str):
    """Sets torch's default dtype (torch.set_default_dtype)."""
    torch.set_default_dtype(getattr(torch, dtype))


@contextmanager
def set_default_float_dtype_ctx(dtype: str):
    """torch's default dtype set for the block."""
    old = torch.get_default_dtype()
    set_default_float_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def get_default_int_dtype() -> str:
    """int64: the dtype of dimtorch's index tensors (range_over_dim, top_k, argmax)."""
    return _int_dtype


def get_default_array_index_dtype() -> str:
    """The dtype of index tensors: get_default_int_dtype()."""
    return get_default_int_dtype()


def is_float_dtype(dtype: str) -> bool:
    """Whether dtype is a float dtype (float16/32/64, bfloat16)."""
    return dtype.startswith("float") or dtype.startswith("bfloat")
