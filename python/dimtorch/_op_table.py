"""The op table: every public op's one Python definition and, where it has one, its C++ fast path.

The definition is the op's semantics: readable, traceable by torch.compile, and what runs for every
call the fast path does not take. A fast path (a function of dimtorch._C) takes the common eager
call on real tensors and must give what the definition gives; the property tests run every row of
this table to check that. While torch.compile traces, Dynamo inlines the definition in place of the
fast path (dimtorch._compile registers each row with torch.compiler.substitute_in_graph).
"""
from __future__ import annotations

import importlib
from typing import Callable, NamedTuple, Optional

from . import _C


class Op(NamedTuple):
    name: str                        # public name: dimtorch.<name>
    definition: Callable             # the Python definition
    fast_path: Optional[Callable]    # the C++ function of dimtorch._C, or None


# name -> module holding its definition (a function of the same name). Rows whose name is a
# function of dimtorch._C have a fast path.
_DEFINITIONS = {
    "pad": "_pad",
    "concat": "_concat",
    "gather": "_gather",
    "merge_dims": "_shape_ops",
    "slice": "_slicing",
    "shift_right": "_slicing",
    "reverse_sequence": "_slicing",
    "split": "_stack",
    "stack": "_stack",
    "top_k": "_sort",
    "pack_padded": "_packing",
    "scatter": "_scatter",
    "dropout": "_dropout",
    # Python-only ops (no fast path): their definitions are all there is.
    "one_hot": "_gather",
    "sparse_to_dense": "_gather",
    "unpack_padded": "_packing",
    "cumsum": "_sort",
    "sort": "_sort",
    "unstack": "_stack",
    "shift_left": "_slicing",
    "split_dims": "_shape_ops",
    "expand_dim": "_shape_ops",
    "squeeze": "_shape_ops",
    "replace_dim": "_shape_ops",
    "conv": "_conv",
    "transposed_conv": "_conv",
    "pool": "_pool",
    "cross_entropy": "_loss",
    "ctc_loss": "_loss",
    "loss_mean_over_frames": "_loss",
    "sequence_mask": "_mask",
    "convert_to_tensor": "_creation",
    "zeros_like": "_creation",
    "ones_like": "_creation",
    "range_over_dim": "_creation",
    "random_uniform": "_creation",
    "random_normal": "_creation",
}


def _load() -> dict:
    table = {}
    for name, module in _DEFINITIONS.items():
        definition = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        table[name] = Op(name, definition, getattr(_C, name, None))
    return table


OPS: dict = _load()
