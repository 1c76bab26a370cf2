"""Signature compatibility of dimtorch.rf's names with RETURNN frontend's (tests/rf/test_namespace*.py).

A dimtorch.rf callable is compatible with rf's when a call written against rf's signature binds the
same way: rf's positional parameters in the same order (same names, except where dimtorch's is
positional-only: a Tensor operand, which rf code passes positionally), every keyword rf takes taken
(or listed in NOT_TAKEN with the reason), rf's defaults equal, rf's *args taken, and every other
parameter of dimtorch's optional. A C++ op's signature is its Python definition's (the fast path and
the definition are held equal by tests/ops/test_fuzz_fast_paths.py)."""
from __future__ import annotations

import inspect
from typing import Optional

P = inspect.Parameter
_POS = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)

# rf parameters dimtorch.rf does not take (a call passing them is a TypeError), and why.
_PACKED = "RETURNN's TensorLayout (its packed backend)"
_STATE = "RETURNN's explicit random states and static-tracing draws (dimtorch draws from torch's generator)"
NOT_TAKEN = {
    **{(m, n): {"like": _PACKED} for m, n in (("const", "full"), ("const", "fill"), ("const", "constant"),
                                              ("const", "zeros"), ("const", "ones"), ("array_", "sequence_mask"))},
    **{("rand", n): {"algorithm": _STATE, "explicit_state": _STATE, "auto_update_state": _STATE, "static": _STATE,
                     "out": _STATE, "like": _PACKED}
       for n in ("random_uniform", "random_normal", "random_truncated_normal")},
    ("reduce", "reduce_sum"): {"distributed": "a sum across processes (torch.distributed) is not taken"},
    ("normalization", "moments"): {
        "correction": "the biased variance only", "distributed": "a sum across processes is not taken",
        "compute_dtype": "cast x first"},
    ("dims", "num_elements_of_shape"): {"source": _PACKED},
    ("array_", "window"): {},
}


def signature_of(obj) -> Optional[inspect.Signature]:
    """obj's signature; for a C++ op of dimtorch's table, its Python definition's (also under a
    functools.partial)."""
    import functools
    from dimtorch._op_table import OPS
    if isinstance(obj, functools.partial):
        inner = next((op.definition for op in OPS.values() if op.fast_path is not None and op.fast_path is obj.func),
                     obj.func)
        return inspect.signature(functools.partial(inner, *obj.args, **obj.keywords))
    for op in OPS.values():
        if op.fast_path is not None and op.fast_path is obj:
            return inspect.signature(op.definition)
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


_ALIASES = {"swish": "silu"}  # one function under both of rf's names


def _same_default(a, b) -> bool:
    if a is b:
        return True
    if hasattr(a, "dimension") and hasattr(b, "dimension") and hasattr(a, "name") and hasattr(b, "name"):
        return (a.name, a.dimension) == (b.name, b.dimension)  # a default Dim: rf's and ours are other objects
    if callable(a) and callable(b):  # e.g. gating's gate_func=sigmoid: rf's function vs dimtorch's op
        names = [getattr(f, "__name__", "").lstrip("_") for f in (a, b)]
        return _ALIASES.get(names[0], names[0]) == _ALIASES.get(names[1], names[1])
    try:
        return bool(a == b) and type(a) in (type(b), int, float) and type(b) in (type(a), int, float)
    except Exception:  # noqa: BLE001 (a comparison that raises is no match)
        return False


def problems(rf_sig: inspect.Signature, our_sig: inspect.Signature, not_taken: dict) -> list:
    """What a call written against rf_sig would find different in our_sig (empty: compatible)."""
    rf_params = list(rf_sig.parameters.values())
    ours = list(our_sig.parameters.values())
    by_name = {p.name: p for p in ours}
    var_kw = any(p.kind is P.VAR_KEYWORD for p in ours)
    var_pos = any(p.kind is P.VAR_POSITIONAL for p in ours)
    out = []
    rf_pos = [p for p in rf_params if p.kind in _POS]
    our_pos = [p for p in ours if p.kind in _POS]
    positional_only_match = set()
    for i, p in enumerate(rf_pos):
        if i >= len(our_pos):
            if not var_pos:
                out.append(f"rf's positional parameter {i} ({p.name}) is not positional here")
            continue
        q = our_pos[i]
        if q.kind is P.POSITIONAL_ONLY:
            positional_only_match.add(p.name)
        elif q.name != p.name:
            out.append(f"positional parameter {i} is {q.name!r} here, {p.name!r} in rf")
    if any(p.kind is P.VAR_POSITIONAL for p in rf_params) and not var_pos:
        out.append("rf takes *args, this does not")
    for p in rf_params:
        if p.kind not in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY) or p.name in not_taken:
            continue
        q = by_name.get(p.name)
        if p.name in positional_only_match:
            q = our_pos[rf_pos.index(p)]
        elif q is None or q.kind is P.POSITIONAL_ONLY:
            if not var_kw:
                out.append(f"keyword {p.name!r} is not taken")
            continue
        if p.default is not P.empty:
            if q.default is P.empty:
                out.append(f"{p.name!r}: rf's default is {p.default!r}, here it is required")
            elif not _same_default(p.default, q.default):
                out.append(f"{p.name!r}: default {q.default!r} here, {p.default!r} in rf")
    rf_names = {p.name for p in rf_params}
    for j, q in enumerate(ours):
        if q.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD) or q.default is not P.empty or q.name in rf_names:
            continue
        if q.kind is P.POSITIONAL_ONLY and j < len(rf_pos):
            continue
        out.append(f"{q.name!r} is required here and not a parameter of rf")
    return out
