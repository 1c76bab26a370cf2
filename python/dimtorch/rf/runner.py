"""A small training loop for RETURNN-style step code: what RETURNN's demo `_custom_loop` does, without
RETURNN's engine, config files or datasets (the data stays the user's).

The step module (a Python module, a path to a .py file, or any object with these attributes) defines:

    extern_data = {"data": Tensor("data", [batch_dim, time_dim, in_dim], dtype="float32"), ...}
        # (or RETURNN config dicts {"dims": [...], "dtype": ..., "sparse_dim": ...}, a TensorDict, or a
        #  function returning one of these)
    def get_model(*, epoch: int, step: int) -> rf.Module
    def train_step(*, model, extern_data: TensorDict) -> None      # marks losses: loss.mark_as_loss("ce")
    def forward_step(*, model, extern_data: TensorDict) -> None    # optional: out.mark_as_default_output()
    def train_batches(*, epoch: int) -> Iterable[batch]             # optional: for `python -m dimtorch.rf.runner`
    def forward_batches() -> Iterable[batch]                        # optional: for --forward

A batch is a dict of padded torch tensors (axes in the template's dims order) and lengths, in RETURNN's keys:
"name" -> padded raw, "name:size<i>" -> the lengths of its dim i (or "name:seq_len" for its one dim with
lengths), or "name" -> (padded, lengths). Each step binds the declared dims to the batch
(TensorDict.assign_from_raw_tensor_dict_: `dim.dyn_size_ext` per batch), sets up the run context
(rf.init_train_step_run_ctx(train_flag=True, step=, epoch=)), runs train_step, differentiates
get_run_ctx().total_loss(), optionally clips the gradients, and steps a torch optimizer whose parameter
groups carry each parameter's rf weight_decay (param.weight_decay, as RETURNN code sets it).

Losses are reported as RETURNN's engine reports them: each loss's summed value over its inv_norm_factor
(the mean over valid frames), read from the device only at the logged steps (log_every).

    from dimtorch.rf import runner
    result = runner.train(my_setup, my_batches, epochs=2, learning_rate=1e-3)
    for outputs in runner.forward(my_setup, my_test_batches, model=result.model): ...

    python -m dimtorch.rf.runner my_setup.py --epochs 2 --lr 1e-3 [--save model.pt] [--forward]
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

import torch

from .._C import Dim, Tensor
from .._core.args import dims_str
from . import run_ctx as _run_ctx

__all__ = ["train", "forward", "TrainResult", "load_step_module", "make_optimizer", "bind_batch", "main"]


@dataclass
class TrainResult:
    """What train() gives: the model, the optimizer, the global step and epoch reached, and per logged step
    a dict of the losses (name -> summed / inv_norm_factor, "total" the differentiated loss)."""
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    step: int
    epoch: int
    losses: List[Dict[str, float]] = field(default_factory=list)


def load_step_module(spec) -> Any:
    """The step module: a module object (or any object with get_model/train_step), a path to a .py file, or
    an importable module name."""
    if not isinstance(spec, (str, os.PathLike)):
        return spec
    spec = os.fspath(spec)
    if spec.endswith(".py") or os.path.sep in spec:
        name = os.path.splitext(os.path.basename(spec))[0]
        module_spec = importlib.util.spec_from_file_location(name, spec)
        if module_spec is None:
            raise FileNotFoundError(f"dimtorch.rf.runner: cannot load {spec!r}")
        mod = importlib.util.module_from_spec(module_spec)
        sys.modules.setdefault(name, mod)
        module_spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(spec)


# -- extern data ---------------------------------------------------------------------------------------
def _tensor_dict_cls():
    try:
        from .tensor import TensorDict
    except ImportError:
        return None
    return TensorDict


def _spec_entries(step_module) -> Dict[str, Any]:
    spec = getattr(step_module, "extern_data", None)
    if spec is None:
        spec = getattr(step_module, "get_extern_data", None)
    if callable(spec) and not isinstance(spec, dict):
        spec = spec()
    if spec is None:
        raise AttributeError("dimtorch.rf.runner: the step module defines no extern_data (a dict of Tensor "
                             "templates or config dicts, or a TensorDict)")
    data = getattr(spec, "data", spec)
    if not isinstance(data, dict):
        raise TypeError(f"dimtorch.rf.runner: extern_data must be a dict or TensorDict, got {type(spec).__name__}")
    return dict(data)


def _config_dict_opts(name: str, opts: dict) -> dict:
    """RETURNN's config dict of one extern data entry -> Tensor template keywords."""
    dims = opts.get("dims", opts.get("dim_tags"))
    if dims is None:
        raise ValueError(f"dimtorch.rf.runner: extern_data[{name!r}] needs 'dims' (or 'dim_tags')")
    sparse_dim = opts.get("sparse_dim")
    dtype = opts.get("dtype") or ("int32" if sparse_dim is not None else "float32")
    return dict(dims=tuple(dims), dtype=dtype, sparse_dim=sparse_dim, feature_dim=opts.get("feature_dim"))


def make_extern_data(step_module):
    """The step module's extern data as a TensorDict of templates (dimtorch.rf.tensor's), or, without that
    package, as specs for bind_batch's stand-in binding."""
    entries = _spec_entries(step_module)
    TensorDict = _tensor_dict_cls()
    if TensorDict is None:
        return {name: _config_dict_opts(name, v) if isinstance(v, dict) else
                dict(dims=tuple(v.dims), dtype=v.dtype, sparse_dim=v.sparse_dim, feature_dim=v.feature_dim)
                for name, v in entries.items()}
    templates = {}
    for name, v in entries.items():
        if isinstance(v, dict):
            templates[name] = Tensor(name, **_config_dict_opts(name, v))
        else:
            templates[name] = v
    return TensorDict(templates)


def _raw_dict(batch: Dict[str, Any], dims_of: Dict[str, tuple]) -> Dict[str, Any]:
    """A batch in RETURNN's raw keys: "name" and "name:size<i>" (from "name:seq_len" or (padded, lengths))."""
    out = {}
    for key, value in batch.items():
        if key.endswith(":seq_len"):
            name = key[: -len(":seq_len")]
            out[f"{name}:size{_dynamic_axis(name, dims_of)}"] = value
        elif isinstance(value, (tuple, list)) and len(value) == 2 and key in dims_of:
            out[key] = value[0]
            out[f"{key}:size{_dynamic_axis(key, dims_of)}"] = value[1]
        else:
            out[key] = value
    return out


def _is_batch(d: Dim) -> bool:
    from ._dims import is_batch_dim
    return is_batch_dim(d)


def _dynamic_axis(name: str, dims_of: Dict[str, tuple]) -> int:
    if name not in dims_of:
        raise KeyError(f"dimtorch.rf.runner: the batch has lengths of {name!r}, which extern_data lacks")
    axes = [i for i, d in enumerate(dims_of[name]) if d.size is None and not _is_batch(d)]
    if len(axes) != 1:
        raise ValueError(f"dimtorch.rf.runner: {name!r} has dims ({dims_str(dims_of[name])}); lengths given without "
                         f"an axis need exactly one dim with lengths (use '{name}:size<i>' keys)")
    return axes[0]


def _to_device(x, device):
    if device is None or not isinstance(x, torch.Tensor):
        return x
    return x.to(device, non_blocking=True)


def bind_batch(extern_data, batch: Dict[str, Any], *, device=None):
    """Fills the extern data from one batch (see the module docstring) and returns the TensorDict the step
    functions get: the declared dims bound to the batch's lengths (lengths stay on the host), the raws on
    `device`. (Without dimtorch.rf.tensor: a dict of Tensors over per-batch dims that stand in for the
    declared ones; step code then takes its dims from extern_data.)"""
    if isinstance(extern_data, dict):
        return _bind_stand_in(extern_data, batch, device)
    dims_of = {k: tuple(v.dims) for k, v in extern_data.items()}
    raw = _raw_dict(batch, dims_of)
    raw = {k: (_to_device(v, device) if ":size" not in k else v) for k, v in raw.items()}
    extern_data.reset_content()
    extern_data.assign_from_raw_tensor_dict_(raw)
    return extern_data


class _StandInDict(dict):
    @property
    def data(self) -> dict:
        return self


def _bind_stand_in(specs: Dict[str, dict], batch: Dict[str, Any], device):
    dims_of = {k: tuple(v["dims"]) for k, v in specs.items()}
    raw = _raw_dict(batch, dims_of)
    new: Dict[Dim, Dim] = {}
    out = _StandInDict()
    for name, spec in specs.items():
        if name not in raw:
            continue
        x = raw[name]
        for i, d in enumerate(spec["dims"]):  # (a batch dim stays: its size comes from the data)
            if d in new or d.size is not None or _is_batch(d):
                continue
            lengths = raw.get(f"{name}:size{i}")
            if lengths is None:
                raise KeyError(f"dimtorch.rf.runner: the batch lacks the lengths of {name!r} axis {i} ({d!r})")
            batch_dims = tuple(e for e in spec["dims"] if _is_batch(e))
            lengths = lengths if isinstance(lengths, torch.Tensor) else torch.as_tensor(lengths)
            new[d] = Dim(Tensor(lengths.to("cpu", torch.int64), batch_dims), name=d.name)
        dims = tuple(new.get(d, d) for d in spec["dims"])
        sparse = spec.get("sparse_dim")
        feature = spec.get("feature_dim")
        out[name] = Tensor(_to_device(x, device), dims, sparse_dim=new.get(sparse, sparse),
                           feature_dim=new.get(feature, feature))
    return out


# -- optimizer ---------------------------------------------------------------------------------------
def param_groups(model: torch.nn.Module, weight_decay: Optional[float] = None) -> List[dict]:
    """Parameter groups: by each parameter's rf weight_decay (param.weight_decay; 0 when not set), or, with a
    float weight_decay, that one for all parameters except biases (RETURNN's PyTorch engine's rule), 0 for
    those. Parameters that do not require grad are left out."""
    groups: Dict[float, list] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if weight_decay is None:
            wd = float(p.__dict__.get("weight_decay") or 0.0)
        else:
            wd = 0.0 if name.endswith("bias") else float(weight_decay)
        groups.setdefault(wd, []).append(p)
    return [{"params": ps, "weight_decay": wd} for wd, ps in groups.items()]


def make_optimizer(model: torch.nn.Module, optimizer: Union[str, Callable] = "adam", *, learning_rate: float = 1e-3,
                   weight_decay: Optional[float] = None, **opts) -> torch.optim.Optimizer:
    """A torch optimizer ("adam", "adamw", "nadam", "sgd", or a class/callable taking (param_groups, lr=, **opts))
    over param_groups(model, weight_decay)."""
    groups = param_groups(model, weight_decay)
    if callable(optimizer):
        return optimizer(groups, lr=learning_rate, **opts)
    classes = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "nadam": torch.optim.NAdam,
               "sgd": torch.optim.SGD}
    try:
        cls = classes[optimizer.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"dimtorch.rf.runner: unknown optimizer {optimizer!r} (known: {', '.join(classes)}, or a "
                         f"torch optimizer class)") from None
    return cls(groups, lr=learning_rate, **opts)


# -- loops -------------------------------------------------------------------------------------------
def _loss_values(ctx) -> Dict[str, Any]:
    """Per loss, summed / inv_norm_factor as a detached Tensor (no device read)."""
    out = {}
    for name, loss in ctx.losses.items():
        summed = loss.get_summed_loss().raw.detach()
        norm = loss.get_inv_norm_factor()
        if isinstance(norm, Tensor):
            norm = norm.raw.to(summed.device, non_blocking=True)
        out[name] = summed / norm
    return out


def _format(step: int, epoch: int, values: Dict[str, float], seconds: float) -> str:
    losses = " ".join(f"{k} {v:.6g}" for k, v in values.items())
    return f"dimtorch.rf.runner: epoch {epoch} step {step}: {losses} ({seconds * 1e3:.1f} ms)"


def train(step_module, batches: Union[Iterable[Dict[str, Any]], Callable[..., Iterable[Dict[str, Any]]]], *,
          epochs: int = 1, num_steps: Optional[int] = None, model: Optional[torch.nn.Module] = None,
          optimizer: Union[str, Callable, torch.optim.Optimizer] = "adam", learning_rate: float = 1e-3,
          weight_decay: Optional[float] = None, optimizer_opts: Optional[dict] = None, gradient_clip: float = 0.0,
          gradient_clip_global_norm: float = 0.0, device=None, step: int = 0, epoch: int = 1, log_every: int = 1,
          log: Optional[Callable[[str], None]] = print) -> TrainResult:
    """Trains the step module's model on `batches` (an iterable, re-iterated per epoch, or a function
    `batches(epoch=)`) for `epochs` epochs (or up to num_steps steps). See the module docstring."""
    mod = load_step_module(step_module)
    if model is None:
        model = mod.get_model(epoch=epoch, step=step)
    if device is not None:
        model.to(device)
    model.train()
    if not isinstance(optimizer, torch.optim.Optimizer):
        optimizer = make_optimizer(model, optimizer, learning_rate=learning_rate, weight_decay=weight_decay,
                                   **(optimizer_opts or {}))
    extern_data = make_extern_data(mod)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    result = TrainResult(model, optimizer, step, epoch)
    pending: List[tuple] = []  # (step, epoch, loss tensors, seconds) until the next log point

    def flush():
        for s, e, values, seconds in pending:
            floats = {k: float(v) for k, v in values.items()}
            result.losses.append(floats)
            if log is not None:
                log(_format(s, e, floats, seconds))
        pending.clear()

    for ep in range(epoch, epoch + epochs):
        data = batches(epoch=ep) if callable(batches) else batches
        for batch in data:
            if num_steps is not None and result.step - step >= num_steps:
                break
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            ed = bind_batch(extern_data, batch, device=device)
            _run_ctx.init_train_step_run_ctx(train_flag=True, step=result.step, epoch=ep)
            mod.train_step(model=model, extern_data=ed)
            ctx = _run_ctx.get_run_ctx()
            total = ctx.total_loss()
            values = _loss_values(ctx)
            if isinstance(total, Tensor):
                total.raw.backward()
                values["total"] = total.raw.detach()
                if gradient_clip:
                    torch.nn.utils.clip_grad_value_(params, gradient_clip)
                if gradient_clip_global_norm:
                    torch.nn.utils.clip_grad_norm_(params, gradient_clip_global_norm)
                optimizer.step()
            pending.append((result.step, ep, values, time.perf_counter() - t0))
            result.step += 1
            if log_every and result.step % log_every == 0:
                flush()
        result.epoch = ep
        if num_steps is not None and result.step - step >= num_steps:
            break
    flush()
    _run_ctx.reset_run_ctx()
    return result


def forward(step_module, batches: Iterable[Dict[str, Any]], *, model: Optional[torch.nn.Module] = None, device=None,
            epoch: int = 1, step: int = 0) -> Iterator[Dict[str, Tensor]]:
    """Runs the step module's forward_step (no gradients, train flag off) per batch; yields the outputs it
    marked (name -> Tensor). The outputs' dims are the batch's: use them before taking the next batch (the
    declared dims are bound to each batch in turn)."""
    mod = load_step_module(step_module)
    if model is None:
        model = mod.get_model(epoch=epoch, step=step)
    if device is not None:
        model.to(device)
    model.eval()
    extern_data = make_extern_data(mod)
    for batch in batches:
        ed = bind_batch(extern_data, batch, device=device)
        _run_ctx.init_forward_step_run_ctx(epoch=epoch, step=step)
        with torch.no_grad():
            mod.forward_step(model=model, extern_data=ed)
        ctx = _run_ctx.get_run_ctx()
        outputs = getattr(ctx.outputs, "data", ctx.outputs)
        _run_ctx.reset_run_ctx()
        yield dict(outputs)


# -- command line ------------------------------------------------------------------------------------
def main(argv: Optional[List[str]] = None) -> int:
    """python -m dimtorch.rf.runner SETUP.py [options]: trains with the setup's train_batches(epoch=); with
    --forward, runs forward_step over its forward_batches() and prints the outputs' dims and shapes."""
    p = argparse.ArgumentParser(prog="python -m dimtorch.rf.runner", description=__doc__.split("\n\n")[0])
    p.add_argument("setup", help="the step module: a .py file or a module name")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    p.add_argument("--optimizer", default="adam")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=None,
                   help="for all parameters but biases (default: each parameter's own rf weight_decay)")
    p.add_argument("--gradient-clip", type=float, default=0.0)
    p.add_argument("--gradient-clip-global-norm", type=float, default=0.0)
    p.add_argument("--device", default=None)
    p.add_argument("--log-every", type=int, default=1)
    p.add_argument("--load", default=None, help="a RETURNN checkpoint (.pt) to start from")
    p.add_argument("--save", default=None, help="write a RETURNN checkpoint (.pt) after training")
    p.add_argument("--forward", action="store_true", help="run forward_step over forward_batches() instead")
    args = p.parse_args(argv)
    mod = load_step_module(args.setup)
    model = mod.get_model(epoch=1, step=0)
    if args.load:
        from .checkpoint import load_returnn_checkpoint
        load_returnn_checkpoint(args.load, model)
    if args.forward:
        for i, outputs in enumerate(forward(mod, mod.forward_batches(), model=model, device=args.device)):
            shown = ", ".join(f"{k}: ({dims_str(v.dims)})" for k, v in outputs.items())
            print(f"dimtorch.rf.runner: batch {i}: {shown}")
        return 0
    if not hasattr(mod, "train_batches"):
        p.error(f"{args.setup} defines no train_batches(*, epoch)")
    result = train(mod, lambda epoch: mod.train_batches(epoch=epoch), epochs=args.epochs, num_steps=args.steps,
                   model=model, optimizer=args.optimizer, learning_rate=args.lr, weight_decay=args.weight_decay,
                   gradient_clip=args.gradient_clip, gradient_clip_global_norm=args.gradient_clip_global_norm,
                   device=args.device, log_every=args.log_every)
    if args.save:
        from .checkpoint import save_returnn_checkpoint
        save_returnn_checkpoint(args.save, result.model, epoch=result.epoch, step=result.step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
