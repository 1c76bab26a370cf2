"""The run context of a step (RETURNN frontend's rf.run_ctx): the train flag, step and epoch, and what a
step marks: losses (train_step) and outputs (forward_step).

A training loop calls `init_train_step_run_ctx(train_flag=True, step=, epoch=)`, then the user's
`train_step`, then `get_run_ctx().total_loss()` and backward (dimtorch.rf.runner does this); a forward
loop calls `init_forward_step_run_ctx(...)`, `forward_step`, and reads `get_run_ctx().outputs`.

Loss semantics, as RETURNN's PyTorch engine computes them (tests/rf/test_run_ctx.py runs the same
programs on both): `Loss.get_summed_loss()` is the sum over all of the loss's dims, valid frames only
(padding never counts); `get_mean_loss()` is that sum over the number of valid elements
(`custom_inv_norm_factor` summed, when given); `get_inv_norm_factor()` is that count (or that sum);
`total_loss()` sums, over the losses that are not `as_error` and whose scale is not 0, the summed loss
(the mean with `use_normalized_loss=True`) times `scale`. The engine reports each loss as
summed / inv_norm_factor (dimtorch.rf.runner logs the same).

dimtorch's modules (dimtorch.rf.Module) take their train flag from the run context while one is set up
(as RETURNN's modules do), else from torch's module.train()/eval().
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from types import FunctionType
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch

from .. import _C
from .._C import Dim, Tensor
from .._core import run_ctx as _slot
from .._core.args import dims_str

__all__ = ["RunCtx", "Loss", "get_run_ctx", "get_run_ctx_step", "init_train_step_run_ctx",
           "init_forward_step_run_ctx", "reset_run_ctx"]

_run_ctx: Optional["RunCtx"] = None  # the context of the current step (also installed in _core.run_ctx)
_init_run_ctx: Optional["RunCtx"] = None  # what get_run_ctx() gives outside a step (stage "init")


def _outputs_dict():
    """An empty TensorDict (dimtorch.rf.tensor's, when present; else a dict with RETURNN's `.data`)."""
    try:
        from .tensor import TensorDict
    except ImportError:
        return _OutputDict()
    return TensorDict()


class _OutputDict(dict):
    """The outputs of a forward step: a dict of name -> Tensor, also reachable as `.data` (TensorDict's)."""

    @property
    def data(self) -> dict:
        return self


def init_train_step_run_ctx(*, train_flag: Union[bool, Tensor] = True, step: Union[int, Tensor] = 0,
                            epoch: Union[int, Tensor] = 1) -> None:
    """Sets up the run context of a training (or, with train_flag=False, evaluation) step: call it before
    each train_step; losses marked in the step are collected in get_run_ctx().losses."""
    _install(RunCtx(stage="train_step", train_flag=train_flag, step=step, epoch=epoch))


def init_forward_step_run_ctx(*, expected_outputs=None, step: Union[int, Tensor] = 0,
                              epoch: Union[int, Tensor] = 1) -> None:
    """Sets up the run context of a forward step (train flag off): outputs marked in the step are
    collected in get_run_ctx().outputs. `expected_outputs` (a TensorDict of templates) names the
    outputs the step must mark and their dims."""
    _install(RunCtx(stage="forward_step", expected_outputs=expected_outputs, step=step, epoch=epoch))


def reset_run_ctx() -> None:
    """Ends the current step's run context (get_run_ctx() then gives the "init" context)."""
    _install(None)


def _install(ctx: Optional["RunCtx"]) -> None:
    global _run_ctx
    _run_ctx = ctx
    _slot.install(ctx)


def get_run_ctx() -> "RunCtx":
    """The run context of the current step; outside a step the "init" context (train flag off)."""
    global _init_run_ctx
    if _run_ctx is not None:
        return _run_ctx
    if _init_run_ctx is None:
        _init_run_ctx = RunCtx(stage="init")
    return _init_run_ctx


def get_run_ctx_step() -> Tensor:
    """get_run_ctx().get_step_tensor()."""
    return get_run_ctx().get_step_tensor()


def current_train_flag(func=None) -> Optional[bool]:
    """The train flag of the current step's context for `func` (see RunCtx.is_train_flag_enabled), or
    None outside a step: dimtorch.rf.Module.training reads this."""
    ctx = _run_ctx
    if ctx is None:
        return None
    flags = ctx._train_flags_stack[-1]
    flag = flags.get(_slot.flag_key(func), flags[None]) if func is not None and len(flags) > 1 else flags[None]
    return flag if type(flag) is bool else bool(flag.raw) if isinstance(flag, Tensor) else bool(flag)


def _scalar_tensor(value) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return Tensor(torch.tensor(value), ())


class RunCtx:
    """The context of one step: `stage` ("init", "train_step" or "forward_step"), `train_flag`, `step`,
    `epoch`, the marked `losses` (name -> Loss) and `outputs` (a TensorDict of name -> Tensor)."""

    publishes_train_flags = True  # train_flag_ctx tells dimtorch._core.run_ctx (rf.dropout's flag in C++)

    def __init__(self, *, stage: str, train_flag: Union[bool, Tensor] = False, step: Union[int, Tensor] = 0,
                 epoch: Union[int, Tensor] = 1, expected_outputs=None):
        if stage not in ("init", "train_step", "forward_step"):
            raise ValueError(f"dimtorch.rf.RunCtx(): stage must be 'init', 'train_step' or 'forward_step', got {stage!r}")
        self._stage = stage
        self._train_flags_stack: List[Dict[Optional[Callable], Union[bool, Tensor]]] = [{None: train_flag}]
        self._step, self._epoch = step, epoch
        self.losses: Dict[str, Loss] = {}
        self.outputs = _outputs_dict()
        self.expected_outputs = expected_outputs

    def __repr__(self):
        return f"<RunCtx stage={self._stage!r} train_flag={self.train_flag!r} step={self._step!r}>"

    @property
    def stage(self) -> str:
        return self._stage

    @property
    def train_flag(self) -> Union[bool, Tensor]:
        """Whether this step trains (dropout and the like on): is_train_flag_enabled(func=None)."""
        return self._train_flags_stack[-1][None]

    def is_train_flag_enabled(self, *, func: Optional[Callable] = None) -> Union[bool, Tensor]:
        """The train flag for `func` (e.g. dimtorch.rf.dropout, or SomeModule.__call__) when a
        train_flag_ctx set one for it, else the step's."""
        flags = self._train_flags_stack[-1]
        return flags.get(_slot.flag_key(func), flags[None]) if func is not None else flags[None]

    @contextmanager
    def train_flag_ctx(self, train_flag: Union[bool, Tensor], *,
                       func: Optional[Union[Callable, Sequence[Callable]]] = None):
        """Within the block, the train flag is `train_flag` (for `func` only, a function or several, when
        given: e.g. `func=dimtorch.rf.BatchNorm.__call__` keeps batch norm's statistics frozen)."""
        flags = dict(self._train_flags_stack[-1])
        funcs = [None] if func is None else list(func) if isinstance(func, (list, tuple)) else [func]
        for f in funcs:
            if f is not None and not callable(f):
                raise TypeError(f"dimtorch.rf.RunCtx.train_flag_ctx(): func must be a function or functions, got "
                                f"{type(f).__name__}")
            flags[_slot.flag_key(f)] = train_flag
        self._train_flags_stack.append(flags)
        _slot.train_flags_changed(self)
        try:
            yield
        finally:
            self._train_flags_stack.pop()
            _slot.train_flags_changed(self)

    @property
    def step(self) -> Union[int, Tensor]:
        """The global train step (from 0, not reset per epoch)."""
        return self._step

    @property
    def epoch(self) -> Union[int, Tensor]:
        return self._epoch

    def get_step_tensor(self) -> Tensor:
        return _scalar_tensor(self._step)

    def get_epoch_tensor(self) -> Tensor:
        return _scalar_tensor(self._epoch)

    # -- losses ----------------------------------------------------------------------------------
    def mark_as_loss(self, loss: Union[Tensor, torch.Tensor], name: str, *, dims: Optional[Sequence[Dim]] = None,
                     scale: float = 1.0, as_error: bool = False, use_normalized_loss: bool = False,
                     use_flatten_frames: bool = True, custom_inv_norm_factor: Optional[Tensor] = None) -> None:
        """Marks `loss` (e.g. over (batch, time), or (batch,)) as the loss `name` of this train step.
        Do not reduce the dims over which the loss should be normalized: the sum and the mean are taken
        here (valid frames only). See the module docstring for scale, as_error, use_normalized_loss and
        custom_inv_norm_factor. `use_flatten_frames` is accepted (RETURNN's packed accumulation gives the
        same sums: padding never counts here)."""
        caller = "dimtorch.rf.RunCtx.mark_as_loss()"
        if self._stage != "train_step":
            raise RuntimeError(f"{caller}: losses are marked in a train step (init_train_step_run_ctx()); the run "
                               f"context is in stage {self._stage!r}")
        if not isinstance(name, str):
            raise TypeError(f"{caller}: name must be a str, got {type(name).__name__}")
        if isinstance(loss, torch.Tensor):
            if dims is None:
                raise ValueError(f"{caller}: a torch.Tensor loss {name!r} needs dims=")
            loss = Tensor(loss, tuple(dims))
        elif not isinstance(loss, Tensor):
            raise TypeError(f"{caller}: loss {name!r} must be a dimtorch.Tensor, got {type(loss).__name__}")
        if not (loss.raw.dtype.is_floating_point or loss.raw.dtype.is_complex):
            loss = _C.cast(loss, "float32")
        if name in self.losses:
            raise ValueError(f"{caller}: a loss named {name!r} was already marked in this step")
        if custom_inv_norm_factor is not None and not isinstance(custom_inv_norm_factor, Tensor):
            custom_inv_norm_factor = _scalar_tensor(custom_inv_norm_factor)
        self.losses[name] = Loss(loss=loss, name=name, scale=scale, as_error=as_error,
                                 use_normalized_loss=use_normalized_loss, use_flatten_frames=use_flatten_frames,
                                 custom_inv_norm_factor=custom_inv_norm_factor)

    def total_loss(self) -> Union[Tensor, float]:
        """The loss to differentiate: the sum over the losses that are not as_error and have a nonzero
        scale of scale * (mean if use_normalized_loss else sum); 0.0 (a float) when none counts."""
        caller = "dimtorch.rf.RunCtx.total_loss()"
        if self._stage != "train_step":
            raise RuntimeError(f"{caller}: the run context is in stage {self._stage!r}, not a train step")
        if not self.losses:
            raise RuntimeError(f"{caller}: no loss was marked in this step (Tensor.mark_as_loss(name) or "
                               f"get_run_ctx().mark_as_loss(loss, name))")
        total = 0.0
        for loss in self.losses.values():
            if loss.scale == 0.0 or loss.as_error:
                continue
            total = total + loss.get_scaled_reduced_loss()
        return total

    # -- outputs ---------------------------------------------------------------------------------
    def mark_as_output(self, tensor: Union[Tensor, torch.Tensor], name: str, *, dims: Optional[Sequence[Dim]] = None,
                       shape: Optional[Sequence[Dim]] = None) -> None:
        """Marks `tensor` as the output `name` of this forward step, its raw permuted to `dims` (or
        `shape`, the same; the Tensor's dims in any order). Without dims: the batch dim first, then the
        dims with lengths, then the rest, in the Tensor's order."""
        caller = "dimtorch.rf.RunCtx.mark_as_output()"
        if self._stage != "forward_step":
            raise RuntimeError(f"{caller}: outputs are marked in a forward step (init_forward_step_run_ctx()); the "
                               f"run context is in stage {self._stage!r}")
        if dims is not None and shape is not None:
            raise TypeError(f"{caller}: give dims or shape, not both")
        dims = shape if dims is None else dims
        expected = None
        if self.expected_outputs is not None:
            data = getattr(self.expected_outputs, "data", self.expected_outputs)
            if name not in data:
                raise ValueError(f"{caller}: unexpected output {name!r}; the expected outputs are {list(data)}")
            expected = data[name]
            if dims is None:
                dims = expected.dims
        if isinstance(tensor, torch.Tensor):
            if dims is None:
                raise ValueError(f"{caller}: a torch.Tensor output {name!r} needs dims=")
            tensor = Tensor(tensor, tuple(dims))
        elif not isinstance(tensor, Tensor):
            raise TypeError(f"{caller}: output {name!r} must be a dimtorch.Tensor, got {type(tensor).__name__}")
        if dims is None:
            dims = _default_dim_order(tensor)
        dims = tuple(dims)
        if len(dims) != len(tensor.dims) or not all(any(d is e for e in tensor.dims) for d in dims):
            raise ValueError(f"{caller}: output {name!r} has dims ({dims_str(tensor.dims)}), not the given dims "
                             f"({dims_str(dims)})")
        raw = tensor.raw if tensor.dims == dims else tensor.raw_aligned(dims)
        data = getattr(self.outputs, "data", self.outputs)
        if name in data:
            raise ValueError(f"{caller}: an output named {name!r} was already marked in this step")
        data[name] = Tensor(raw, dims, sparse_dim=tensor.sparse_dim,
                            feature_dim=tensor.feature_dim if tensor.feature_dim in dims else None, name=name)

    def mark_as_default_output(self, tensor: Union[Tensor, torch.Tensor], *,
                               shape: Optional[Sequence[Dim]] = None) -> None:
        """mark_as_output(tensor, "output", dims=shape)."""
        self.mark_as_output(tensor, "output", dims=shape)

    def check_outputs_complete(self) -> None:
        """With expected outputs: raises unless exactly those were marked."""
        if self.expected_outputs is not None:
            want = set(getattr(self.expected_outputs, "data", self.expected_outputs))
            have = set(getattr(self.outputs, "data", self.outputs))
            if want != have:
                raise ValueError(f"dimtorch.rf.RunCtx.check_outputs_complete(): expected outputs {sorted(want)}, "
                                 f"marked {sorted(have)}")


def _default_dim_order(tensor: Tensor) -> tuple:
    """The batch dim first, then dims with lengths, then the rest (each in the Tensor's order)."""
    from ._dims import is_batch_dim
    dims = list(tensor.dims)
    first = [d for d in dims if is_batch_dim(d)]
    dynamic = [d for d in dims if not is_batch_dim(d) and d.lengths is not None]
    rest = [d for d in dims if not is_batch_dim(d) and d.lengths is None]
    return tuple(first + dynamic + rest)


@dataclass
class Loss:
    """A loss marked by RunCtx.mark_as_loss (see the module docstring for the reductions)."""

    loss: Tensor
    name: str
    scale: float = 1.0
    as_error: bool = False
    use_normalized_loss: bool = False
    use_flatten_frames: bool = True
    custom_inv_norm_factor: Optional[Tensor] = None

    _summed_loss_cached: Optional[Tensor] = None
    _mean_loss_cached: Optional[Tensor] = None

    def get_summed_loss(self) -> Tensor:
        """The sum of the loss over all its dims (valid frames only): a scalar Tensor."""
        if not self.loss.dims:
            return self.loss
        if self._summed_loss_cached is None:
            self._summed_loss_cached = _C.reduce_sum(self.loss, axis=self.loss.dims)
        return self._summed_loss_cached

    def get_mean_loss(self) -> Tensor:
        """The summed loss over the number of valid elements (over the sum of custom_inv_norm_factor
        when given): a scalar Tensor."""
        if self._mean_loss_cached is not None:
            return self._mean_loss_cached
        if self.custom_inv_norm_factor is not None:
            summed = self.get_summed_loss()
            norm = self.custom_inv_norm_factor
            if norm.dims:
                norm = _C.reduce_sum(norm, axis=norm.dims)
            norm = norm.raw.to(device=summed.raw.device, dtype=summed.raw.dtype, non_blocking=True)
            self._mean_loss_cached = Tensor(summed.raw / norm, ())
        elif not self.loss.dims:
            self._mean_loss_cached = self.loss
        else:
            self._mean_loss_cached = _C.reduce_mean(self.loss, axis=self.loss.dims)
        return self._mean_loss_cached

    def get_inv_norm_factor(self) -> Union[int, Tensor]:
        """The sum of custom_inv_norm_factor when given, else the number of valid elements of the loss
        (an int when its dims are static, else an int Tensor; from the host lengths: no device read)."""
        if self.custom_inv_norm_factor is not None:
            norm = self.custom_inv_norm_factor
            return _C.reduce_sum(norm, axis=norm.dims) if norm.dims else norm
        from ..ops.shape_counts import num_elements_of_shape
        if not self.loss.dims:
            return 1
        if all(d.lengths is None for d in self.loss.dims):
            return self.loss.raw.numel()  # (dims whose size comes from data: the raw's)
        try:
            return num_elements_of_shape(self.loss.dims)
        except ValueError:  # e.g. a dim from data that no lengths are over: count the valid elements on the device
            ones = Tensor(torch.ones_like(self.loss.raw, dtype=torch.int64), self.loss.dims)
            return _C.reduce_sum(ones, axis=self.loss.dims)

    def get_scaled_reduced_loss(self) -> Tensor:
        """scale * (get_mean_loss() if use_normalized_loss else get_summed_loss()): what total_loss sums."""
        loss = self.get_mean_loss() if self.use_normalized_loss else self.get_summed_loss()
        return loss * self.scale if self.scale != 1.0 else loss
