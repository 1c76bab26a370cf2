"""Agreement of outputs: every implementation's result, brought to PyTorch's layout, against the reference.

Named results are permuted to the row's `out` order by dim name, using only `.dims` and the raw tensor (not
the framework's own alignment code, which is under test). A dim whose name is not in `out` (one an op made,
e.g. the concat dim) takes the slot whose name the result lacks.
"""
from __future__ import annotations

import torch

from .data import DROPOUT_P


def as_raw(result, out_names):
    """The result as a raw torch tensor (or a tuple of them) in the order of `out_names`."""
    if isinstance(result, torch.Tensor):
        return result
    if isinstance(result, (tuple, list)):
        return tuple(as_raw(item, out_names) for item in result)
    raw = result.raw_tensor if hasattr(result, "raw_tensor") else result.raw
    return raw.permute(_permutation([d.name for d in result.dims], list(out_names)))


def _permutation(have: list, want: list) -> list:
    if len(have) != len(want):
        raise ValueError(f"output dims {have} do not match the expected {want}")
    perm = [have.index(name) if name in have else None for name in want]
    leftovers = [i for i, name in enumerate(have) if name not in want]
    for slot, name in enumerate(want):
        if perm[slot] is None:
            if not leftovers:
                raise ValueError(f"output dims {have} do not match the expected {want}")
            perm[slot] = leftovers.pop(0)
    return perm


def disagreement(row, reference, candidate, torch_side) -> str:
    """'' when the candidate agrees with the reference (both raw, PyTorch layout), else what differs."""
    if row.check == "dropout":
        return _dropout_disagreement(candidate, torch_side.x)
    refs = reference if isinstance(reference, tuple) else (reference,)
    cands = candidate if isinstance(candidate, tuple) else (candidate,)
    if len(refs) != len(cands):
        return f"{len(cands)} outputs, expected {len(refs)}"
    valid = getattr(torch_side, row.valid_frames) if row.valid_frames else None
    for index, (ref, cand) in enumerate(zip(refs, cands)):
        problem = _tensor_disagreement(ref, cand, valid, row.tolerance, flat=row.out == "raw")
        if problem:
            return problem if len(refs) == 1 else f"output {index}: {problem}"
    return ""


def _tensor_disagreement(ref, cand, valid, tolerance, flat) -> str:
    if flat and ref.numel() == cand.numel():
        ref, cand = ref.reshape(-1), cand.reshape(-1)
    if ref.shape != cand.shape:
        return f"shape {tuple(cand.shape)}, expected {tuple(ref.shape)}"
    if ref.device.type == "meta" or cand.device.type == "meta":
        return ""
    if valid is not None:
        ref, cand = torch.where(valid, ref, 0), torch.where(valid, cand, 0)
    if ref.is_complex() or cand.is_complex():
        ref, cand = torch.view_as_real(ref.resolve_conj()), torch.view_as_real(cand.resolve_conj())
    if ref.dtype == torch.bool or cand.dtype == torch.bool:
        return "" if torch.equal(ref, cand) else f"{int((ref != cand).sum())} values differ"
    ref, cand = ref.detach().double(), cand.detach().double()
    scale = max(1.0, float(ref.abs().nan_to_num(posinf=0.0, neginf=0.0).max())) if ref.numel() else 1.0
    if torch.allclose(cand, ref, rtol=tolerance, atol=tolerance * scale, equal_nan=True):
        return ""
    worst = float((cand - ref).abs().nan_to_num(nan=float("inf")).max())
    return f"max abs difference {worst:.3g} (tolerance {tolerance:g} x scale {scale:.3g})"


def _dropout_disagreement(out, x) -> str:
    """Dropout outputs differ by RNG, so check the contract: each value is 0 or x / (1 - p), some dropped."""
    if out.shape != x.shape:
        return f"shape {tuple(out.shape)}, expected {tuple(x.shape)}"
    if out.device.type == "meta":
        return ""
    dropped = out == 0
    kept_ok = torch.isclose(out, x / (1.0 - DROPOUT_P), rtol=1e-5, atol=1e-6)
    if not bool((dropped | kept_ok).all()):
        return "values are neither 0 nor x / (1 - p)"
    fraction = float(dropped.float().mean())
    if not 0.0 < fraction < 0.5:
        return f"dropped fraction {fraction:.2f} is implausible for p={DROPOUT_P}"
    return ""
