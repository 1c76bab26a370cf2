"""Loops and conditionals with dims (RETURNN frontend's eager semantics): while_loop, scan, cond.

Loop variables are nested structures (tuples, lists, dicts, named tuples and registered pytree
nodes) whose leaves are Tensors, Dims, None or Python values; bodies are plain Python callables.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Tuple, Union

import torch
import torch.utils._pytree as pytree

from .._C import Dim, Tensor, cast, logical_and, where
from .._core import in_graph as _in_graph, sizes as _sizes, tracing as _tracing
from .._core.data_dependent import read_bool, read_int, to_host
from .._core.args import dim_str, dims_arg, dims_str
from ._support import names_argument_errors


def _is_leaf(v) -> bool:
    return isinstance(v, (Tensor, Dim))


def _flatten(tree):
    return pytree.tree_flatten(tree, is_leaf=_is_leaf)


_LEAF_SPEC = _flatten(0)[1]  # the spec of a single leaf (a Tensor state, output or xs: no pytree walk per call)


class _NotPlain(Exception):
    """A tree that _zip_map does not walk (or two that differ): pytree decides, and explains."""


_SCALARS = (bool, int, float, complex, str)


def _zip_map(fn, new, old):
    """fn(new leaf, old leaf) over two trees of the same structure, rebuilt as new's: the per-step walk of a
    loop's state without building pytree specs. Walks Tensors, Dims, None and Python scalars in
    tuples, lists, dicts (same key order, as pytree compares them) and dict types that name their children's
    order with a `_dt_tree_keys(d)` static method (rf.State, whose pytree node lists the same keys);
    _NotPlain for any other node (named tuples, registered pytree nodes) or a difference in structure."""
    t = type(new)
    if t is Tensor or t is Dim or t in _SCALARS or new is None:  # (None: a leaf to pytree too)
        return fn(new, old)
    if t is not type(old):
        raise _NotPlain
    if t is tuple or t is list:
        if len(new) != len(old):
            raise _NotPlain
        return t([_zip_map(fn, a, b) for a, b in zip(new, old)])
    if t is dict:
        if list(new) != list(old):
            raise _NotPlain
        return {k: _zip_map(fn, v, old[k]) for k, v in new.items()}
    order = getattr(t, "_dt_tree_keys", None)
    if order is None:
        raise _NotPlain
    keys = order(new)
    if keys != order(old):
        raise _NotPlain
    return t([(k, _zip_map(fn, new[k], old[k])) for k in keys])


def _same_structure(a, b) -> bool:
    """Whether a and b are the same nested structure (containers and leaf kinds), cheaply for plain
    tuples, lists and dicts (a loop checks this every iteration); other nodes go through pytree."""
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is tuple or ta is list:
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            tx = type(x)
            if tx is not type(y) or (tx is not Tensor and tx is not int and tx is not float and
                                     not _same_structure(x, y)):
                return False
        return True
    if ta is dict:
        return a.keys() == b.keys() and all(_same_structure(a[k], b[k]) for k in a)
    if ta is Tensor or ta is Dim or a is None or ta in (bool, int, float, str, complex):
        return True
    return _flatten(a)[1] == _flatten(b)[1]


def _truth(value, caller: str, what: str) -> bool:
    """A Python bool, or a scalar bool Tensor's value (read from the device: the loop's length or
    the branch depends on data)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, Tensor) and value.dims == () and value.dtype == "bool":
        return read_bool(value.raw)
    shown = f"a Tensor over ({dims_str(value.dims)}) of {value.dtype}" if isinstance(value, Tensor) else \
        type(value).__name__
    raise TypeError(f"{caller}: {what} must give a bool or a scalar bool Tensor, got {shown}")


@names_argument_errors("dimtorch.cond()")
def cond(pred: Union[bool, Tensor], true_fn: Callable[[], Any], false_fn: Callable[[], Any]):
    """true_fn() if pred else false_fn(). `pred` is a bool or a scalar bool Tensor; a Tensor's value
    is read from the device (the branch taken depends on data)."""
    caller = "dimtorch.cond()"
    if not callable(true_fn) or not callable(false_fn):
        raise TypeError(f"{caller}: true_fn and false_fn must be callables")
    return true_fn() if _truth(pred, caller, "pred") else false_fn()


@names_argument_errors("dimtorch.while_loop()")
def while_loop(cond: Callable[[Any], Union[bool, Tensor]], body: Callable[[Any], Any], initial: Any):
    """`while cond(loop_vars): loop_vars = body(loop_vars)`; returns the final loop vars. Each body
    call must return the structure of `initial` (Tensors may change their dims, e.g. a growing
    history). A Tensor condition is read from the device once per iteration (the number of
    iterations depends on data)."""
    caller = "dimtorch.while_loop()"
    if not callable(cond) or not callable(body):
        raise TypeError(f"{caller}: cond and body must be callables")
    loop_vars = initial
    while _truth(cond(loop_vars), caller, "cond"):
        new_vars = body(loop_vars)
        _check_same_structure(new_vars, loop_vars)
        loop_vars = new_vars
    return loop_vars


def _check_same_structure(new_vars, loop_vars) -> None:
    """A ValueError naming while_loop unless the body's new_vars have loop_vars' structure (while_loop's fast
    path, src/ops/loop.cpp, calls this for every structure it does not check itself)."""
    if not _same_structure(new_vars, loop_vars):
        raise ValueError(f"dimtorch.while_loop(): body returned another structure than initial's: "
                         f"{_flatten(new_vars)[1]} vs {_flatten(loop_vars)[1]}")


def _mask_leaf(new, old, mask: Tensor, caller: str):
    """where(mask, new, old) for one leaf of a state (RETURNN frontend's rules): a Tensor that has
    all of the old leaf's dims and all of the mask's dims is masked; one without the mask's dims (or
    without all of the old leaf's, e.g. a grown history) is taken as it is."""
    if isinstance(new, Tensor):
        if type(old) is Tensor and new.dims == old.dims and all(d in new.dims for d in mask.dims):
            return where(mask, new, old)  # the common case: the state keeps its dims
        if not isinstance(old, Tensor) or not all(d in new.dims for d in old.dims):
            return new
        inside = [d in new.dims for d in mask.dims]
        if all(inside):
            return where(mask, new, old)
        if not any(inside):
            return new
        raise ValueError(f"{caller}: a state Tensor over ({dims_str(new.dims)}) has some but not all of the "
                         f"sequence dims ({dims_str(mask.dims)}); it cannot be kept per sequence")
    if new is None or isinstance(new, (Dim, bool, int, float, complex, str)):
        return new
    raise TypeError(f"{caller}: a state leaf of type {type(new).__name__} cannot be kept per sequence; use "
                    f"Tensors, Dims, None or Python numbers (or register the type as a pytree node)")


def _same_leaf_layout(new, old) -> bool:
    if type(new) is Tensor:
        return (type(old) is Tensor and new.dims == old.dims and new.feature_dim is old.feature_dim
                and new.sparse_dim is old.sparse_dim)
    return not isinstance(old, Tensor)  # None, Dims, numbers: _mask_leaf takes new for them


def _keeps_layout(new, old) -> bool:
    """Whether every leaf of the body's new state has its old leaf's dims and markers (and the same
    structure): then masking it on a step where every sequence runs gives new itself."""
    if type(new) is Tensor or type(old) is Tensor:
        return _same_leaf_layout(new, old)
    kept = [True]

    def check(n, o):
        if kept[0] and not _same_leaf_layout(n, o):
            kept[0] = False
        return n
    try:
        _zip_map(check, new, old)
        return kept[0]
    except _NotPlain:
        pass
    new_leaves, spec = _flatten(new)
    old_leaves, old_spec = _flatten(old)
    return spec == old_spec and all(_same_leaf_layout(n, o) for n, o in zip(new_leaves, old_leaves))


def _masked_state(new, old, mask: Tensor, caller: str):
    if type(new) is Tensor and type(old) is Tensor:  # the common single-Tensor state, without pytree
        return _mask_leaf(new, old, mask, caller)
    try:
        return _zip_map(lambda n, o: _mask_leaf(n, o, mask, caller), new, old)
    except _NotPlain:
        pass
    new_leaves, spec = _flatten(new)
    old_leaves, old_spec = _flatten(old)
    if spec != old_spec:
        raise ValueError(f"{caller}: body returned a state of another structure than the one it got: {spec} vs "
                         f"{old_spec}")
    return pytree.tree_unflatten([_mask_leaf(n, o, mask, caller) for n, o in zip(new_leaves, old_leaves)], spec)


class _Outputs:
    """Per-step outputs checked against the ys templates, stacked over the scan dim at the end."""

    def __init__(self, ys, caller: str):
        self.caller = caller
        self.templates, self.spec = ([ys], _LEAF_SPEC) if type(ys) is Tensor else _flatten(ys)
        for t in self.templates:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"{caller}: ys must hold Tensor templates (or None), got {type(t).__name__}")
        self.steps = [[] for _ in self.templates]
        self.single = ys if type(ys) is Tensor else None

    def add(self, y) -> None:
        if type(y) is Tensor and self.single is not None and y.dims == self.single.dims:
            self.steps[0].append(y)  # the common single-Tensor output in its template's order
            return
        leaves, spec = _flatten(y)
        if spec != self.spec:
            raise ValueError(f"{self.caller}: body's outputs have another structure than the ys templates: {spec} vs "
                             f"{self.spec}")
        for i, (leaf, template) in enumerate(zip(leaves, self.templates)):
            if template is None:
                continue
            if not isinstance(leaf, Tensor) or len(leaf.dims) != len(template.dims) or \
                    not all(d in template.dims for d in leaf.dims):
                shown = f"({dims_str(leaf.dims)})" if isinstance(leaf, Tensor) else type(leaf).__name__
                raise ValueError(f"{self.caller}: output {i} is {shown}, its template has dims "
                                 f"({dims_str(template.dims)})")
            self.steps[i].append(leaf)

    def stacked(self, spatial_dim: Dim, as_lists: bool):
        out = []
        for template, steps in zip(self.templates, self.steps):
            if template is None:
                out.append(None)
            elif as_lists:
                out.append(steps)
            else:
                dims = steps[0].dims if steps else template.dims
                if steps:
                    raw = torch.stack([s.raw if s.dims == dims else s.raw_aligned(dims) for s in steps])
                else:
                    raw = template.raw.new_empty((0,) + tuple(template.raw.shape))
                feature_dim = template.feature_dim if template.feature_dim in dims else None
                out.append(Tensor(raw, (spatial_dim,) + tuple(dims), sparse_dim=template.sparse_dim,
                                  feature_dim=feature_dim))
        return out[0] if self.single is not None else pytree.tree_unflatten(out, self.spec)


def _unstacked(xs, spatial_dim: Dim, n: int, caller: str) -> list:
    """xs as one structure per step: each Tensor leaf indexed along spatial_dim (views)."""
    leaves, spec = ([xs], _LEAF_SPEC) if type(xs) is Tensor else _flatten(xs)
    per_leaf = []
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            if spatial_dim not in leaf.dims:
                raise ValueError(f"{caller}: an xs Tensor lacks spatial_dim {dim_str(spatial_dim)} "
                                 f"(its dims: {dims_str(leaf.dims)})")
            axis = leaf.dims.index(spatial_dim)
            rest = leaf.dims[:axis] + leaf.dims[axis + 1:]
            lengths = spatial_dim.lengths
            if lengths is not None and all(d in leaf.dims for d in lengths.dims):
                # Steps beyond a sequence's end see 0, not garbage: their outputs are padding, and a
                # NaN there would still reach valid gradients (0 * NaN) through the state.
                leaf = leaf.copy_masked(0, (spatial_dim,))
            feature_dim = leaf.feature_dim if leaf.feature_dim is not spatial_dim else None
            per_leaf.append([Tensor(r, rest, sparse_dim=leaf.sparse_dim, feature_dim=feature_dim)
                             for r in leaf.raw.unbind(axis)[:n]])
        else:
            per_leaf.append([leaf] * n)
    if spec is _LEAF_SPEC:
        return per_leaf[0]
    return [pytree.tree_unflatten([steps[i] for steps in per_leaf], spec) for i in range(n)]


@names_argument_errors("dimtorch.scan()")
def scan(*, spatial_dim: Optional[Dim] = None, cond_dims: Optional[Sequence[Dim]] = None,
         cond_before_body: bool = True, initial: Any = None, xs: Any = None, ys: Any = None,
         cond: Optional[Callable[[Any, Any], Tensor]] = None, body: Callable[[Any, Any], Tuple[Any, Any]],
         max_seq_len: Optional[Union[int, Tensor]] = None, return_tensor_arrays: bool = False):
    """A loop over frames with per-sequence ends (RETURNN frontend's scan); returns
    (ys, final state, spatial_dim). `body(x, s) -> (y, new s)`; `ys` gives the outputs' structure
    as Tensor templates (dims of one step), the results are stacked over spatial_dim (first).

    - spatial_dim given (static or with lengths): one step per frame up to its max size; `xs`
      (Tensors over spatial_dim) give each step's frame, 0 beyond a sequence's length (padding is
      zeroed once, so NaN garbage reaches no valid output or gradient). A sequence's state stops
      changing after its last frame (state Tensors over the lengths' dims are kept by
      where(frame < length, new, old)); outputs beyond a sequence's length are padding. No device
      reads.
    - spatial_dim None: loop while `cond(None, s)` (a bool Tensor over `cond_dims`) holds for some
      entry, at most `max_seq_len` steps; each entry's length is its number of steps with cond true
      (cond_before_body: checked before the first step too; else the first step always runs). As in
      RETURNN frontend, the step whose new state makes an entry's cond false counts (its output is
      the entry's last frame) but that new state does not: the entry keeps the state it had before
      that step. The new spatial_dim has these lengths. Reads the device once per step (whether to go on) and once at the end (the lengths).
    State leaves: Tensors, Dims, None, Python values, in tuples, lists, dicts, named tuples or
    registered pytree nodes. `return_tensor_arrays=True` gives each output as the list of its steps."""
    caller = "dimtorch.scan()"
    if not callable(body):
        raise TypeError(f"{caller}: body must be a callable")
    outputs = _Outputs(ys, caller)
    if spatial_dim is not None:
        if not isinstance(spatial_dim, Dim):
            raise TypeError(f"{caller}: spatial_dim must be a Dim or None, got {type(spatial_dim).__name__}")
        if cond is not None or max_seq_len is not None or cond_dims is not None:
            raise ValueError(f"{caller}: with spatial_dim {dim_str(spatial_dim)} the loop length is known; "
                             f"cond, cond_dims and max_seq_len are for spatial_dim=None")
        if _tracing.tracing() and not return_tensor_arrays:
            return _scan_in_graph(spatial_dim, initial, xs, ys, body, outputs, caller)
        n = spatial_dim.get_max_size()
        if n is None:
            raise ValueError(f"{caller}: spatial_dim {dim_str(spatial_dim)} takes its size from data; give xs' dim "
                             f"with a size or lengths, or loop with cond")
        steps = _unstacked(xs, spatial_dim, n, caller) if xs is not None else [None] * n
        masks = _step_masks(spatial_dim, n, _device_of(initial, xs))
        # Steps before the shortest sequence's end have every frame valid: where(mask, new, old) would
        # give new's values (the host min of the lengths, cached on the dim with the max: no device read),
        # and new itself where each leaf keeps its old dims and markers (else where's rules apply as before).
        all_running = (spatial_dim._min_size() or 0) if masks is not None else n
        all_in = [None]  # the state's dims once they are known to hold the mask's dims
        # (the common step inline: a single output in its template's order, a state Tensor keeping its dims)
        out_steps, out_dims = (outputs.steps[0], outputs.single.dims) if outputs.single is not None else (None, None)
        state = initial
        for i in range(n):
            out = body(steps[i], state)
            if type(out) is not tuple or len(out) != 2:
                out = _body_result(out, caller)
            y, new_state = out
            if out_steps is not None and type(y) is Tensor and y.dims == out_dims:
                out_steps.append(y)
            else:
                outputs.add(y)
            if type(new_state) is Tensor and type(state) is Tensor and new_state.dims == state.dims:
                if i < all_running and new_state.feature_dim is state.feature_dim and \
                        new_state.sparse_dim is state.sparse_dim:
                    state = new_state
                    continue
                if new_state.dims == all_in[0]:
                    state = where(masks[i], new_state, state)
                    continue
            if i < all_running and _keeps_layout(new_state, state):
                state = new_state
            elif type(new_state) is Tensor and type(state) is Tensor and new_state.dims == state.dims == all_in[0]:
                state = where(masks[i], new_state, state)  # a single state Tensor over the mask's dims, as before
            else:
                state = _masked_state(new_state, state, masks[i], caller)
                if type(state) is Tensor and all(d in state.dims for d in masks[i].dims):
                    all_in[0] = state.dims
        return outputs.stacked(spatial_dim, return_tensor_arrays), state, spatial_dim
    if cond is None or cond_dims is None:
        raise ValueError(f"{caller}: without spatial_dim, give cond and cond_dims (the dims of cond's result)")
    if xs is not None:
        raise ValueError(f"{caller}: xs need spatial_dim (the dim to take their frames from)")
    cond_dims = dims_arg(cond_dims, caller, "cond_dims")
    state = initial
    if cond_before_body:
        running = _checked_cond(cond(None, initial), cond_dims, caller)
    else:
        running = Tensor(torch.ones((), dtype=torch.bool), ())  # broadcast to cond_dims after the first step
    lengths = Tensor(torch.zeros((), dtype=torch.int64), ())
    i = 0
    while read_bool(running.raw.any()) and (max_seq_len is None or i < _limit(max_seq_len, caller)):
        lengths = lengths + cast(running, "int64")
        y, new_state = _call_body(body, None, state, caller)
        outputs.add(y)
        running = logical_and(_checked_cond(cond(None, new_state), cond_dims, caller), running)
        state = _masked_state(new_state, state, running, caller)
        i += 1
    if not cond_dims:
        new_dim = Dim(i, name="scan")
    else:
        new_dim = Dim(_lengths_over(lengths, running, cond_dims, caller), name="scan")
    return outputs.stacked(new_dim, return_tensor_arrays), state, new_dim


def _scan_in_graph(spatial_dim: Dim, initial, xs, ys, body, outputs: "_Outputs", caller: str):
    """scan over spatial_dim while tracing: the frame loop as one torch scan over the dim's padded size in
    the trace (symbolic), so one graph serves every length, where a Python loop would be unrolled per
    length. The semantics are the eager loop's: xs' padding zeroed, each step's frame mask from the
    lengths (in the graph), state Tensors kept per sequence by where(frame < length, new, old). In the
    graph, state leaves must keep their dims (a Tensor may not grow) and other leaves their values."""
    n = _sizes.padded_size(spatial_dim, caller, what="spatial_dim")
    lengths = spatial_dim.lengths
    state_leaves, state_spec = _flatten(initial)
    state_at = [i for i, leaf in enumerate(state_leaves) if isinstance(leaf, Tensor)]
    x_leaves, x_spec = _flatten(xs) if xs is not None else ([], None)
    x_at = [i for i, leaf in enumerate(x_leaves) if isinstance(leaf, Tensor)]
    x_raws, x_meta = [], {}
    for i in x_at:
        leaf = x_leaves[i]
        if spatial_dim not in leaf.dims:
            raise ValueError(f"{caller}: an xs Tensor lacks spatial_dim {dim_str(spatial_dim)} (its dims: "
                             f"{dims_str(leaf.dims)})")
        if lengths is not None and all(d in leaf.dims for d in lengths.dims):
            leaf = leaf.copy_masked(0, (spatial_dim,))  # (as eagerly: steps beyond a sequence's end see 0)
        rest = tuple(d for d in leaf.dims if d is not spatial_dim)
        x_raws.append(leaf.raw_aligned((spatial_dim,) + rest))
        x_meta[i] = (rest, leaf.sparse_dim, leaf.feature_dim if leaf.feature_dim is not spatial_dim else None)
    templates = outputs.templates
    out_at = [i for i, t in enumerate(templates) if t is not None]
    frames = torch.arange(n, device=_device_of(initial, xs))

    def step(carry, frame, *x_frames):
        leaves = list(state_leaves)
        for i, raw in zip(state_at, carry):
            old = state_leaves[i]
            leaves[i] = Tensor(raw, old.dims, sparse_dim=old.sparse_dim, feature_dim=old.feature_dim)
        state = pytree.tree_unflatten(leaves, state_spec)
        x = None
        if x_spec is not None:
            given = list(x_leaves)
            for i, raw in zip(x_at, x_frames):
                rest, sparse_dim, feature_dim = x_meta[i]
                given[i] = Tensor(raw, rest, sparse_dim=sparse_dim, feature_dim=feature_dim)
            x = pytree.tree_unflatten(given, x_spec)
        y, new_state = _call_body(body, x, state, caller)
        if lengths is not None:
            mask = Tensor(frame < lengths.raw, lengths.dims)
            new_state = _masked_state(new_state, state, mask, caller)
        new_leaves, spec = _flatten(new_state)
        if spec != state_spec:
            raise ValueError(f"{caller}: body returned a state of another structure than initial's: {spec} vs "
                             f"{state_spec}")
        new_carry = [_kept_leaf(new_leaves[i], state_leaves[i], caller) for i in state_at]
        for i, (new, old) in enumerate(zip(new_leaves, state_leaves)):
            if i not in state_at and new is not old and new != old:
                raise ValueError(f"{caller}: while tracing, a state leaf that is not a Tensor must stay as it is "
                                 f"(the loop runs as one torch scan); got {new!r} after {old!r}")
        y_leaves, y_spec = _flatten(y)
        if y_spec != outputs.spec:
            raise ValueError(f"{caller}: body's outputs have another structure than the ys templates: {y_spec} vs "
                             f"{outputs.spec}")
        outs = [_output_raw(y_leaves[i], templates[i], i, caller) for i in out_at] or [frame.clone()]
        inputs = list(carry) + list(x_frames)
        new_carry = [r.clone() if any(r is a for a in inputs) else r for r in new_carry]  # (no output may alias
        outs = [r.clone() if any(r is a for a in inputs + new_carry) else r for r in outs]  # an input or another)
        return new_carry, outs

    carry, stacked = _in_graph.scan_frames(step, [state_leaves[i].raw for i in state_at], [frames] + x_raws)
    leaves = list(state_leaves)
    for i, raw in zip(state_at, carry):
        old = state_leaves[i]
        leaves[i] = Tensor(raw, old.dims, sparse_dim=old.sparse_dim, feature_dim=old.feature_dim)
    out = [None] * len(templates)
    for i, raw in zip(out_at, stacked):
        t = templates[i]
        out[i] = Tensor(raw, (spatial_dim,) + tuple(t.dims), sparse_dim=t.sparse_dim,
                        feature_dim=t.feature_dim if t.feature_dim in t.dims else None)
    return pytree.tree_unflatten(out, outputs.spec), pytree.tree_unflatten(leaves, state_spec), spatial_dim


def _kept_leaf(new, old: Tensor, caller: str) -> torch.Tensor:
    """A state Tensor's raw after a traced step, in the dims order it came in (its dims must stay)."""
    if not isinstance(new, Tensor) or len(new.dims) != len(old.dims) or not all(d in old.dims for d in new.dims):
        shown = f"({dims_str(new.dims)})" if isinstance(new, Tensor) else type(new).__name__
        raise ValueError(f"{caller}: while tracing, a state Tensor must keep its dims ({dims_str(old.dims)}) (the loop "
                         f"runs as one torch scan); body returned {shown}")
    raw = new.raw if new.dims == old.dims else new.raw_aligned(old.dims)
    return raw if raw.dtype == old.raw.dtype else raw.to(old.raw.dtype)


def _output_raw(leaf, template: Tensor, i: int, caller: str) -> torch.Tensor:
    """A step's output raw in its template's dims order."""
    if not isinstance(leaf, Tensor) or len(leaf.dims) != len(template.dims) or \
            not all(d in template.dims for d in leaf.dims):
        shown = f"({dims_str(leaf.dims)})" if isinstance(leaf, Tensor) else type(leaf).__name__
        raise ValueError(f"{caller}: output {i} is {shown}, its template has dims ({dims_str(template.dims)})")
    return leaf.raw if leaf.dims == template.dims else leaf.raw_aligned(template.dims)


def _lengths_over(lengths: Tensor, running: Tensor, cond_dims: tuple, caller: str) -> Tensor:
    """The per-entry step counts on the host, over cond_dims (a count that never met a cond result,
    when no step or only the first ran, is broadcast to cond_dims' sizes)."""
    if lengths.dims == ():
        if running.dims:
            lengths = Tensor(lengths.raw.expand(tuple(running.raw.shape)), running.dims)
        elif all(d.size is not None for d in cond_dims):
            lengths = Tensor(lengths.raw.expand(tuple(d.size for d in cond_dims)), cond_dims)
        else:
            raise ValueError(f"{caller}: no step ran and cond_dims ({dims_str(cond_dims)}) have no sizes; the lengths "
                             f"of the new dim are unknown")
    return Tensor(to_host(lengths.raw).to(torch.int64).contiguous(), lengths.dims)


def _call_body(body, x, state, caller: str):
    return _body_result(body(x, state), caller)


def _body_result(out, caller: str):
    if not isinstance(out, tuple) or len(out) != 2:
        raise TypeError(f"{caller}: body must return (y, new state), got {type(out).__name__}")
    return out


def _checked_cond(c, cond_dims: tuple, caller: str) -> Tensor:
    if not isinstance(c, Tensor) or c.dtype != "bool" or len(c.dims) != len(cond_dims) or \
            not all(d in c.dims for d in cond_dims):
        shown = f"a {c.dtype} Tensor over ({dims_str(c.dims)})" if isinstance(c, Tensor) else type(c).__name__
        raise ValueError(f"{caller}: cond must give a bool Tensor over cond_dims ({dims_str(cond_dims)}), got {shown}")
    return c


def _limit(max_seq_len, caller: str) -> int:
    if isinstance(max_seq_len, Tensor) and max_seq_len.dims == ():
        return read_int(max_seq_len.raw)
    if isinstance(max_seq_len, int) and not isinstance(max_seq_len, bool):
        return max_seq_len
    raise TypeError(f"{caller}: max_seq_len must be an int or a scalar Tensor, got {type(max_seq_len).__name__}")


def _device_of(*trees) -> torch.device:
    for tree in trees:
        if type(tree) is Tensor:
            return tree.raw.device
        for leaf in _flatten(tree)[0]:
            if isinstance(leaf, Tensor):
                return leaf.raw.device
    return torch.device("cpu")


def _step_masks(spatial_dim: Dim, n: int, device) -> Optional[list]:
    """Per step i, the bool Tensor over the lengths' dims: i < length (views of the dim's cached mask
    on the state's device)."""
    lengths = spatial_dim.lengths
    if lengths is None:
        return None
    order = tuple(lengths.dims) + (spatial_dim,)
    mask = spatial_dim.get_mask(dims_order=order, device=device)  # (the C++ cache's fast path)
    raw = mask.raw if mask.dims == order else mask.raw_aligned(order)
    return [Tensor(r, tuple(lengths.dims)) for r in raw.unbind(-1)[:n]]


__all__ = ["cond", "scan", "while_loop"]
