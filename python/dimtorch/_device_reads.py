"""The device reads of ops whose control flow or output size depends on data (scan with cond, while_loop,
cond, ctc_greedy_decode, gather_nested's lengths), in one place.

Every other op reads nothing from the device (DESIGN.md section 2). Each read here is one named call, so
that a graph-capturing path can give it an in-graph form without touching the ops. (Part A of issue 13
keeps the same kind of reads in _data_dependent.py; the two belong together.)
"""
from __future__ import annotations

import torch

_CPU = torch.device("cpu")


def to_host(raw: torch.Tensor) -> torch.Tensor:
    """`raw` on the host (itself when it is there): waits for the device when it is elsewhere."""
    return raw if raw.device == _CPU else raw.to(_CPU)


def read_bool(raw: torch.Tensor) -> bool:
    """The value of a one-element bool raw (a loop condition or a branch): waits for the device."""
    return bool(raw.item())


def read_int(raw: torch.Tensor) -> int:
    """The value of a one-element integer raw (a loop bound): waits for the device."""
    return int(raw.item())
