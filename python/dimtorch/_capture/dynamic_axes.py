"""Graph inputs over dynamic dims get a size symbol of their own under torch.compile.

torch.compile(dynamic=True) (and automatic dynamic shapes) "duck sizes" its inputs: two axes that happen to
have the same size in the first batch (3 sequences of 3 frames, an encoder and a target length that agree)
get one symbol, and the next batch, where they differ, recompiles. A dim of dimtorch says which axes are
independent sizes, so the raws bound to a step's declared dims (TensorDict.assign_from_raw_tensor_dict_,
dimtorch.rf.runner.bind_batch) mark their axes over dims without a static size with
torch._dynamo.maybe_mark_dynamic: a symbol per axis (DimDynamic.DYNAMIC, not duck sized), and no error if
the trace specialises one anyway. Nothing process-wide is changed (torch's use_duck_shape stays as it is),
and nothing happens when torch._dynamo was never imported (no torch.compile in the process).
"""
from __future__ import annotations

import sys


def mark_dynamic_axes(raw, dims) -> None:
    """Marks raw's axes over `dims` (one per axis) that have no static size, for torch.compile."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None or not hasattr(raw, "dim"):
        return
    if dynamo.is_compiling():  # a raw made in the graph is no graph input
        return
    for axis, d in enumerate(dims):
        if d.size is None and axis < raw.dim():
            dynamo.maybe_mark_dynamic(raw, axis)
