"""Runs one RETURNN-style program (a step module written against `returnn.frontend`) on RETURNN frontend
and, with only its import lines edited, on dimtorch.rf, and compares what the two give.

A program is a file in tests/rf/returnn_programs/ written as RETURNN user code: it imports
`returnn.frontend as rf` and `returnn.tensor`, declares its dims once at module level (a dim with
lengths as `Dim(Tensor("time", [batch_dim], dtype="int32"))`), and defines `extern_data` (a TensorDict of
templates), `get_model(*, epoch, step)` and `forward_step` and/or `train_step`, as a RETURNN config does.
`load_program(name, "dimtorch")` runs the same source with `returnn.frontend` -> `dimtorch.rf` and
`returnn.tensor` -> `dimtorch.rf.tensor` on its import lines: the porting edit of docs/porting_from_returnn.md.

Each step binds the declared dims to the batch RETURNN's public way (`dim.dyn_size_ext = Tensor(...,
raw_tensor=)` and `tensor.raw_tensor = ...`), runs the step in a run context, and collects the marked
outputs (padding zeroed, as numpy) or the losses (summed, mean, inv_norm_factor, total) and the
parameter gradients. Both models start from RETURNN's initial parameters (copied by name: the names and
layouts must agree). RETURNN runs with its PyTorch backend at its newest behaviour version
(bench/opsbench/frameworks.py).
"""
from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Dict, List, Optional

import numpy
import torch

PROGRAMS = Path(__file__).resolve().parent / "rf" / "returnn_programs"
_IMPORT = re.compile(r"^\s*(import|from)\s+returnn\.(frontend|tensor|torch\.frontend)\b")


def edit_imports(source: str) -> str:
    """The porting edit: on import lines only, returnn.frontend (and RETURNN's torch frontend,
    returnn.torch.frontend) -> dimtorch.rf, returnn.tensor -> dimtorch.rf.tensor. Every other line stays
    as it is."""
    out = []
    for line in source.splitlines(keepends=True):
        if _IMPORT.match(line):
            line = re.sub(r"\breturnn\.torch\.frontend\b", "dimtorch.rf", line)
            line = re.sub(r"\breturnn\.frontend\b", "dimtorch.rf", line)
            line = re.sub(r"\breturnn\.tensor\b", "dimtorch.rf.tensor", line)
        out.append(line)
    return "".join(out)


def load_program(name: str, framework: str) -> types.ModuleType:
    """The program module for "returnn" (as written) or "dimtorch" (imports edited); a fresh module
    object each time, not registered in sys.modules, so its module-level dims go with it."""
    path = PROGRAMS / f"{name}.py"
    source = path.read_text()
    if framework == "dimtorch":
        source = edit_imports(source)
    mod = types.ModuleType(f"rf_program_{name}_{framework}")
    mod.__file__ = str(path)
    exec(compile(source, str(path), "exec"), mod.__dict__)
    return mod


# ----------------------------------------------------------------------------------------------- batches

def make_batch(prog: types.ModuleType, seed: int, batch: int = 3, max_len: int = 7) -> Dict[str, numpy.ndarray]:
    """Random raws for the program's extern data, RETURNN's raw keys: "name" (padded, padding filled with
    1e4 for floats so that a leak shows) and "name:size<i>" (the lengths of its dynamic axis i). Dims shared
    between tensors get one set of lengths; the first sequence has the longest, the last length 1."""
    rnd = numpy.random.RandomState(seed)
    lengths: Dict[int, numpy.ndarray] = {}
    out: Dict[str, numpy.ndarray] = {}
    for key, t in prog.extern_data.data.items():
        shape = []
        for i, d in enumerate(t.dims):
            if d.is_batch_dim():
                shape.append(batch)
            elif d.dimension is None:
                if id(d) not in lengths:
                    n = rnd.randint(1, max_len + 1, size=batch).astype("int32")
                    n[0], n[-1] = max_len, 1
                    lengths[id(d)] = n
                out[f"{key}:size{i}"] = lengths[id(d)]
                shape.append(int(lengths[id(d)].max()))
            else:
                shape.append(d.dimension)
        if t.sparse_dim is not None:
            raw = rnd.randint(0, t.sparse_dim.dimension, size=shape).astype(t.dtype)
        elif t.dtype == "bool":
            raw = rnd.randint(0, 2, size=shape).astype(bool)
        else:
            raw = rnd.normal(size=shape).astype(t.dtype)
        # padding frames: large floats, labels 0 (valid indices: RETURNN's own fill does the same)
        for i, d in enumerate(t.dims):
            if d.dimension is None and not d.is_batch_dim():
                n = out[f"{key}:size{i}"]
                for b in range(batch):
                    idx = [slice(None)] * len(shape)
                    idx[0] = b
                    idx[i] = slice(int(n[b]), None)
                    raw[tuple(idx)] = 1e4 if raw.dtype.kind == "f" else 0
        out[key] = raw
    return out


def bind_batch(prog: types.ModuleType, raw: Dict[str, numpy.ndarray]) -> None:
    """Binds the program's declared dims to the batch and fills its extern data, as RETURNN user code does
    it: reset, `dim.dyn_size_ext = Tensor(...)` for the batch dim and each dim with lengths, then
    `tensor.raw_tensor = ...`."""
    Tensor, batch_dim = prog.Tensor, prog.batch_dim
    extern = prog.extern_data
    extern.reset_content()
    batch_dim.reset_eager()
    done: List[object] = []
    for key, t in extern.data.items():
        for i, d in enumerate(t.dims):
            if any(d is e for e in done):
                continue
            done.append(d)
            if d.is_batch_dim():
                size = raw[key].shape[i]
                d.dyn_size_ext = Tensor("batch", dims=[], dtype="int32", raw_tensor=torch.tensor(size, dtype=torch.int32))
            elif d.dimension is None:
                n = torch.from_numpy(raw[f"{key}:size{i}"])
                d.dyn_size_ext = Tensor(d.name, dims=[batch_dim], dtype="int32", raw_tensor=n)
    for key, t in extern.data.items():
        t.raw_tensor = torch.from_numpy(raw[key].copy())


# ----------------------------------------------------------------------------------------------- parameters

def parameters_by_name(model) -> Dict[str, torch.Tensor]:
    """name -> raw torch tensor of every parameter (trainable or auxiliary) of an rf model, either framework
    (RETURNN's named_parameters gives rf Parameters, auxiliary ones included; dimtorch.rf's is torch's, and
    keeps auxiliary parameters as buffers)."""
    out = {}
    for name, p in model.named_parameters():
        out[name] = p.raw_tensor if hasattr(p, "raw_tensor") else p
    if isinstance(model, torch.nn.Module):
        for name, b in model.named_buffers():
            out.setdefault(name, b)
    return out


def copy_parameters(src_model, dst_model) -> None:
    """Copies every parameter of the RETURNN model into the dimtorch.rf model by name (same names and
    layouts required: a difference fails with both lists)."""
    src, dst = parameters_by_name(src_model), parameters_by_name(dst_model)
    if set(src) != set(dst):
        raise AssertionError(f"parameter names differ: RETURNN only {sorted(set(src) - set(dst))}, dimtorch.rf "
                             f"only {sorted(set(dst) - set(src))}")
    with torch.no_grad():
        for name, raw in src.items():
            if tuple(raw.shape) != tuple(dst[name].shape):
                raise AssertionError(f"parameter {name}: shape {tuple(raw.shape)} in RETURNN, {tuple(dst[name].shape)} "
                                     f"in dimtorch.rf")
            dst[name].copy_(raw.detach())


# ----------------------------------------------------------------------------------------------- running steps

def _as_numpy(t) -> dict:
    """A marked output: raw with padding zeroed (numpy), and per dim its static size or its lengths."""
    masked = t.copy_masked(0) if t.dims else t
    dims = []
    for d in t.dims:
        if d.dimension is not None:
            dims.append(d.dimension)
        elif d.dyn_size_ext is not None and d.dyn_size_ext.raw_tensor is not None and d.dyn_size_ext.dims:
            dims.append(d.dyn_size_ext.raw_tensor.detach().cpu().numpy().tolist())
        else:
            dims.append(int(masked.raw_tensor.shape[len(dims)]))
    return {"raw": masked.raw_tensor.detach().cpu().numpy(), "dims": dims, "dtype": t.dtype,
            "sparse": None if t.sparse_dim is None else t.sparse_dim.dimension}


def run_forward(prog, model, raw) -> Dict[str, dict]:
    """forward_step on one batch (train flag off); the marked outputs."""
    rf = prog.rf
    bind_batch(prog, raw)
    rf.init_forward_step_run_ctx(epoch=1, step=0)
    with torch.no_grad():
        result = prog.forward_step(model=model, extern_data=prog.extern_data)
    outputs = rf.get_run_ctx().outputs
    data = getattr(outputs, "data", outputs)
    out = {k: _as_numpy(v) for k, v in data.items()}
    if result is not None:
        out["_returned"] = result
    return out


def run_train(prog, model, raw, *, train_flag: bool = True) -> dict:
    """train_step on one batch: every loss's summed, mean and inv_norm_factor, the total loss, and the
    gradients of the parameters by name."""
    rf = prog.rf
    bind_batch(prog, raw)
    for p in parameters_by_name(model).values():
        if p.grad is not None:
            p.grad = None
    rf.init_train_step_run_ctx(train_flag=train_flag, step=0, epoch=1)
    prog.train_step(model=model, extern_data=prog.extern_data)
    ctx = rf.get_run_ctx()
    total = ctx.total_loss()
    res = {"total": float(total.raw_tensor.detach())}
    for name, loss in ctx.losses.items():
        res[f"{name}:summed"] = float(loss.get_summed_loss().raw_tensor.detach())
        res[f"{name}:mean"] = float(loss.get_mean_loss().raw_tensor.detach())
        inv = loss.get_inv_norm_factor()
        res[f"{name}:inv_norm_factor"] = float(inv.raw_tensor.detach().sum()) if hasattr(inv, "raw_tensor") else float(inv)
    total.raw_tensor.backward()
    grads = {n: (None if p.grad is None else p.grad.detach().clone().numpy())
             for n, p in parameters_by_name(model).items() if p.requires_grad}
    return {"losses": res, "grads": grads}


def compare_outputs(ref: Dict[str, dict], got: Dict[str, dict], *, atol: float = 1e-5, rtol: float = 1e-5) -> List[str]:
    """Problems (empty when equal): same output names, dims (sizes, lengths), dtypes (int widths may differ),
    sparse dims, and values on valid frames (padding is zeroed on both sides)."""
    problems = []
    if set(ref) - {"_returned"} != set(got) - {"_returned"}:
        return [f"outputs: RETURNN {sorted(ref)}, dimtorch.rf {sorted(got)}"]
    for k, r in ref.items():
        if k == "_returned":
            continue
        g = got[k]
        if r["dims"] != g["dims"]:
            problems.append(f"{k}: dims {g['dims']}, RETURNN {r['dims']}")
            continue
        if r["dtype"] != g["dtype"] and not (r["dtype"].startswith("int") and g["dtype"].startswith("int")):
            problems.append(f"{k}: dtype {g['dtype']}, RETURNN {r['dtype']}")
        if r["sparse"] != g["sparse"]:
            problems.append(f"{k}: sparse dim {g['sparse']}, RETURNN {r['sparse']}")
        a, b = g["raw"], r["raw"]
        if a.shape != b.shape:
            problems.append(f"{k}: raw shape {a.shape}, RETURNN {b.shape}")
            continue
        if b.dtype.kind in "biu":
            if not numpy.array_equal(a.astype(b.dtype), b):
                problems.append(f"{k}: {int((a.astype(b.dtype) != b).sum())} of {b.size} values differ")
        else:
            tol = atol + rtol * (float(numpy.abs(b).max()) if b.size else 0.0)
            if not numpy.allclose(a, b, atol=tol, rtol=rtol):
                problems.append(f"{k}: max |diff| {float(numpy.abs(a - b).max()):.3g} (tolerance {tol:.2g})")
    return problems


def compare_train(ref: dict, got: dict, *, rtol: float = 1e-5, atol: float = 1e-6) -> List[str]:
    problems = []
    if set(ref["losses"]) != set(got["losses"]):
        problems.append(f"losses: RETURNN {sorted(ref['losses'])}, dimtorch.rf {sorted(got['losses'])}")
    for k, v in ref["losses"].items():
        w = got["losses"].get(k)
        if w is not None and not numpy.isclose(w, v, rtol=rtol, atol=atol):
            problems.append(f"{k}: {w!r}, RETURNN {v!r}")
    for k, v in ref["grads"].items():
        w = got["grads"].get(k)
        if (v is None) != (w is None):
            problems.append(f"grad {k}: {'none' if w is None else 'some'}, RETURNN {'none' if v is None else 'some'}")
        elif v is not None:
            tol = 1e-5 + rtol * float(numpy.abs(v).max())
            if not numpy.allclose(w, v, atol=tol, rtol=1e-4):
                problems.append(f"grad {k}: max |diff| {float(numpy.abs(w - v).max()):.3g} (tolerance {tol:.2g})")
    return problems


def returnn_or_skip():
    """RETURNN frontend set up (PyTorch backend, newest behaviour version), or pytest.skip when not installed."""
    import pytest

    from rf_parity import setup_rf

    rf, problem = setup_rf()
    if rf is None:
        pytest.skip(f"RETURNN frontend not available: {problem}")
    return rf


def both(name: str):
    """The program loaded for RETURNN and for dimtorch.rf, each model built (RETURNN's first, with seed 42),
    RETURNN's initial parameters copied into dimtorch.rf's."""
    returnn_or_skip()
    import returnn.frontend as rf

    ref = load_program(name, "returnn")
    rf.set_random_seed(42)
    ref_model = ref.get_model(epoch=1, step=0)
    ours = load_program(name, "dimtorch")
    our_model = ours.get_model(epoch=1, step=0)
    copy_parameters(ref_model, our_model)
    return ref, ref_model, ours, our_model


def unbind(*progs: Optional[types.ModuleType]) -> None:
    """Leave no batch bound on the global batch dims (the next test binds its own) and no run context
    holding the step's outputs and losses (with them the program's dims)."""
    for p in progs:
        if p is not None:
            p.extern_data.reset_content()
            p.batch_dim.reset_eager()
            reset = getattr(p.rf, "reset_run_ctx", None)
            if reset is not None:
                reset()
