"""make_norm, make_ff: a block's norm or feed-forward module from a class, a module or a callable (RETURNN frontend's)."""
from __future__ import annotations

import copy
import inspect
from typing import Callable, Optional, Union

from .._C import Dim
from .feed_forward import ConformerPositionwiseFeedForward
from .module import Module

__all__ = ["make_norm", "make_ff", "make_self_att"]

_DICT_HINT = "RETURNN config dicts (build_from_dict) are not supported: pass the class or a module"


def make_norm(norm: Union[type, Module, Callable], out_dim: Dim) -> Callable:
    """The norm of a block over out_dim: a class is built as norm(out_dim) (e.g. dt.nn.LayerNorm); a
    module is deep-copied (each block gets its own parameters); another callable (e.g. a function of a
    Tensor) is used as it is."""
    caller = "dimtorch.nn.make_norm()"
    if isinstance(norm, dict):
        raise TypeError(f"{caller}: {_DICT_HINT}")
    if isinstance(norm, type):
        norm = norm(out_dim)
    elif isinstance(norm, Module):
        norm = copy.deepcopy(norm)
    if not callable(norm):
        raise TypeError(f"{caller}: norm must be a class, a module or a callable, got {norm!r}")
    return norm


def _takes_rf_keywords(cls: type) -> bool:
    """Whether cls takes RETURNN's feed-forward keywords (out_dim=, ff_dim=, ...), as FeedForwardGated;
    dimtorch's FeedForward family takes (in_dim, ff_dim) first instead."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return True
    return "out_dim" in params and "in_dim" not in params


def make_ff(*, out_dim: Dim, ff: Union[type, Module, None] = None, ff_dim: Union[Dim, int, None] = None,
            ff_activation: Union[str, Callable, None] = None, dropout: Optional[float] = None) -> Module:
    """The feed-forward part of a block (RETURNN's rf.encoder.conformer.make_ff): ff None gives
    dt.nn.ConformerPositionwiseFeedForward; a module is deep-copied; a class is built with the given
    options (None ones left at the class's defaults) — a class of RETURNN's form (out_dim=, ff_dim=,
    dropout=, activation=, as dt.nn.FeedForwardGated) by keyword, one of dimtorch's FeedForward family
    ((in_dim, ff_dim) first) with out_dim as in_dim. An int ff_dim makes a Dim; that family needs one
    (rf's default, 4 * out_dim, is taken when it is None)."""
    caller = "dimtorch.nn.make_ff()"
    if isinstance(ff, dict):
        raise TypeError(f"{caller}: {_DICT_HINT}")
    if isinstance(ff, Module):
        return copy.deepcopy(ff)
    if ff is None:
        ff = ConformerPositionwiseFeedForward
    if not isinstance(ff, type):
        raise TypeError(f"{caller}: ff must be a module class, a module or None, got {ff!r}")
    if isinstance(ff_dim, int) and not isinstance(ff_dim, bool):
        ff_dim = Dim(ff_dim, name="ff")
    options = {k: v for k, v in dict(dropout=dropout, activation=ff_activation).items() if v is not None}
    if _takes_rf_keywords(ff):
        module = ff(out_dim=out_dim, **({"ff_dim": ff_dim} if ff_dim is not None else {}), **options)
    else:
        module = ff(out_dim, ff_dim if ff_dim is not None else Dim(4 * out_dim.size, name="ff"), **options)
    if not isinstance(module, Module):
        raise TypeError(f"{caller}: ff {ff.__name__} did not make a dimtorch.nn.Module, got {type(module).__name__}")
    return module


def make_self_att(self_att, out_dim: Dim, *, num_heads: int, att_dropout: float, default: type, caller: str,
                  opts: Optional[dict] = None, copy_module: bool = True, **default_kw) -> Module:
    """A block's self-attention over out_dim (RETURNN's self_att option): None builds `default` (with
    default_kw, e.g. dtype, device); a class is built by keyword as rf's blocks do: cls(in_dim=out_dim,
    proj_dim=out_dim, key_dim_total=out_dim, value_dim_total=out_dim, num_heads=, att_dropout=, **opts); a
    module is deep-copied (copy_module, each block its own) or used as it is. The block gives it finite
    padding, so its own zeroing of the padding (a `zero_padding` switch) is turned off."""
    if isinstance(self_att, dict):
        raise TypeError(f"{caller}: self_att: {_DICT_HINT}")
    options = dict(in_dim=out_dim, proj_dim=out_dim, key_dim_total=out_dim, value_dim_total=out_dim,
                   num_heads=num_heads, att_dropout=att_dropout)
    if self_att is None:
        self_att = default(**options, **default_kw, **(opts or {}))
    elif isinstance(self_att, type):
        self_att = self_att(**options, **(opts or {}))
    elif isinstance(self_att, Module):
        self_att = copy.deepcopy(self_att) if copy_module else self_att
    else:
        raise TypeError(f"{caller}: self_att must be None, an attention module class or a module, got {self_att!r}")
    if isinstance(getattr(self_att, "zero_padding", None), bool):
        self_att.zero_padding = False
    return self_att
