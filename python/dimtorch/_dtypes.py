"""dtype names (as Tensor.dtype gives them) to torch dtypes and back."""
import torch

_BY_NAME = {
    name: getattr(torch, name)
    for name in (
        "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
        "bool", "complex64", "complex128", "uint16", "uint32", "uint64",
    )
}


_NAME_OF = {dtype: name for name, dtype in _BY_NAME.items()}


def dtype_name(torch_dtype) -> str:
    """The name Tensor.dtype gives for a torch.dtype ("float32", ...)."""
    name = _NAME_OF.get(torch_dtype)
    if name is None:
        raise TypeError(f"dimtorch: unsupported dtype {torch_dtype}")
    return name


def to_torch_dtype(dtype, caller):
    """torch.dtype for a dtype name or a torch.dtype; None stays None."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _BY_NAME[dtype]
    except (KeyError, TypeError):
        raise ValueError(f"{caller}: unknown dtype {dtype!r} (known: {', '.join(_BY_NAME)})") from None
