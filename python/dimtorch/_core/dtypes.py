"""dtype names (as Tensor.dtype gives them) to torch dtypes and back: the table of src/core/backend.cpp, in its order."""
import torch

# Names torch has (older versions lack some), in the C++ table's order (its error messages list them so).
_BY_NAME = {
    name: getattr(torch, name)
    for name in (
        "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
        "bool", "complex64", "complex128", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2",
    )
    if isinstance(getattr(torch, name, None), torch.dtype)
}
_NAME_OF = {dtype: name for name, dtype in _BY_NAME.items()}


def to_torch_dtype(dtype, caller):
    """torch.dtype for a dtype name or a torch.dtype; None stays None."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _BY_NAME[dtype]
    except (KeyError, TypeError):
        raise ValueError(f"{caller}: unknown dtype {dtype!r} (known: {', '.join(_BY_NAME)})") from None


def dtype_from(value, caller: str) -> torch.dtype:
    """torch.dtype for a dtype name or a torch.dtype of the table, as the C++ ops take it: an unknown
    name is a ValueError, anything else (another dtype, another type) a TypeError."""
    if isinstance(value, str):
        if value in _BY_NAME:
            return _BY_NAME[value]
        raise ValueError(f"{caller}: unknown dtype {value!r} (known: {', '.join(_BY_NAME)})")
    if isinstance(value, torch.dtype) and value in _NAME_OF:
        return value
    raise TypeError(f"{caller}: dtype must be a dtype name such as 'float32' or a torch.dtype, got {value!r}")


def dtype_name(dtype: torch.dtype) -> str:
    """The table's name of a torch.dtype ("float32", ...)."""
    try:
        return _NAME_OF[dtype]
    except KeyError:
        raise TypeError(f"dimtorch: unsupported torch dtype {dtype!r}") from None


def is_integer(dtype: torch.dtype) -> bool:
    """int* and uint* (not bool), as the C++ table classes them."""
    name = _NAME_OF.get(dtype, "")
    return name.startswith("int") or name.startswith("uint")


def is_floating(dtype: torch.dtype) -> bool:
    """float* and bfloat16, as the C++ table classes them."""
    name = _NAME_OF.get(dtype, "")
    return name.startswith("float") or name == "bfloat16"
