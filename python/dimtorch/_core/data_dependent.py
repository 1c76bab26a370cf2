"""The device reads of ops whose output size or control flow depends on data (masked_select, repeat,
ctc_greedy_decode, scan with cond, while_loop, cond, ...), in one place.

Every other op reads nothing from the device (DESIGN.md section 2). These few must: the size of their
result is a count of data, or the loop's length or the branch taken is. Each read is one named call here, so that a graph-capturing path can give
it an in-graph form (an unbacked size) without touching the ops.
"""
from __future__ import annotations

import torch

from . import tracing as _tracing

_CPU = torch.device("cpu")


def to_host(raw: torch.Tensor) -> torch.Tensor:
    """`raw` on the host (itself when it is there): waits for the device when it is elsewhere."""
    return raw if raw.device == _CPU else raw.to(_CPU)


def select_rows(x: torch.Tensor, flat_mask: torch.Tensor) -> torch.Tensor:
    """The rows of x (along its first axis) where the 1-D bool `flat_mask` holds, in order: their
    number becomes known on the host (torch's boolean indexing waits for the device)."""
    return x[flat_mask]


def checkable(raw: torch.Tensor) -> bool:
    """Whether `raw` can be read on the host without waiting for a device: on the CPU (not meta), and
    not being traced (a graph holds no host check). Ops use this to check data-dependent promises
    (counts, ranges) where the check is free."""
    return raw.device == _CPU and not _tracing.tracing()


def read_bool(raw: torch.Tensor) -> bool:
    """The value of a one-element bool raw (a loop condition or a branch): waits for the device."""
    return bool(raw.item())


def read_int(raw: torch.Tensor) -> int:
    """The value of a one-element integer raw (a loop bound): waits for the device."""
    return int(raw.item())
