"""Side-by-side runs of one program on RETURNN frontend (rf) and on dimtorch, compared on valid frames.

A Program is a function of (F, d, x): F is the framework module (`returnn.frontend` or `dimtorch`), d
its dims and x its tensors (the same raw data on both sides, padding filled with PAD, built by
`make_data`). Where the two spell a call alike, one function serves both (`both=`); else `rf=` and
`dt=`. The program returns a Tensor, a Dim or a tuple of them; `out` names, per Tensor result, its
dims in the order to compare them: names of `d`'s dims, or "*" for a dim the op makes (taken in the
result's own order). Dims the op makes are compared too (static size, or lengths per sequence).
rf runs with its PyTorch backend at its newest behavior version (bench/opsbench/frameworks.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Optional

import torch

import dimtorch as dt
from helpers import valid_mask
from repo_scripts import bench_on_path

with bench_on_path():
    from opsbench.frameworks import setup_returnn
    from opsbench.row import missing_requirements

PAD = 1e4  # finite, and large enough that padding leaking into a valid frame shows


@dataclass(frozen=True)
class Program:
    name: str
    both: Optional[Callable] = None
    rf: Optional[Callable] = None
    dt: Optional[Callable] = None
    out: tuple = ()
    requires: tuple = ()  # dimtorch names the program needs (part of the API still to land: skipped)
    pending: bool = False  # API still to land: a TypeError for an unknown keyword skips the program
    atol: float = 1e-5
    rtol: float = 1e-4

    def runner(self, side: str) -> Callable:
        fn = getattr(self, side)
        return fn if fn is not None else self.both

    def missing(self) -> list:
        """The names in `requires` that dimtorch does not have (yet)."""
        return missing_requirements(self)


def setup_rf():
    """returnn.frontend with its PyTorch backend at the newest behavior version, or None (and why)."""
    setup = setup_returnn()
    if not setup.available:
        return None, setup.problem
    from returnn.util.basic import BehaviorVersion
    if BehaviorVersion.get() != BehaviorVersion._latest_behavior_version:
        return None, f"RETURNN's behavior version is already set to {BehaviorVersion.get()} in this process"
    _their_rope_without_compile()
    return setup.rf, ""


def _their_rope_without_compile():
    """RETURNN applies RoPE through a kernel it torch.compiles on first use (~5 CPU-s in each test process);
    its plain ops compute the same (its backend takes them itself when it traces), so the tests compare
    with those."""
    try:
        from returnn.torch.util import rope
    except ImportError:  # another RETURNN: whatever it does
        return
    if hasattr(rope, "apply_rope_plain"):
        rope.apply_rope = rope.apply_rope_plain


LENGTHS = (6, 4, 1)
LENGTHS2 = (3, 5, 2)
LENGTHS3 = (3, 2, 1)  # CTC targets of the sequences of LENGTHS: each has a path
SAMPLES = (400, 250, 120)
SIZES = dict(batch=3, feature=4, out=5, heads=2, head_dim=3, vocab=6, k3=3)


def _raws():
    g = torch.Generator().manual_seed(0)
    B, T, T2, S = 3, max(LENGTHS), max(LENGTHS2), max(SAMPLES)
    F_, O, H, D, V, K = (SIZES[k] for k in ("feature", "out", "heads", "head_dim", "vocab", "k3"))

    def padded(shape, lengths, axis=1, dtype=torch.float32):
        raw = torch.randn(*shape, generator=g).to(dtype)
        for b, n in enumerate(lengths):
            raw.select(0, b).narrow(axis - 1, n, shape[axis] - n).fill_(PAD)
        return raw

    return SimpleNamespace(
        x=padded((B, T, F_), LENGTHS), y=padded((B, T, F_), LENGTHS), z=padded((B, T2, F_), LENGTHS2),
        q4=padded((B, T, H, D), LENGTHS), k4=padded((B, T2, H, D), LENGTHS2), v4=padded((B, T2, H, D), LENGTHS2),
        w=torch.randn(F_, O, generator=g) * 0.5, bias=torch.randn(O, generator=g),
        filter=torch.randn(O, F_, K, generator=g) * 0.3,
        labels=torch.randint(V, (B, T), generator=g), labels2=torch.randint(1, V, (B, T2), generator=g),
        logits=padded((B, T, V), LENGTHS), cond=torch.rand(B, T, generator=g) < 0.5,
        audio=padded((B, S), SAMPLES), positive=padded((B, T, F_), LENGTHS).abs() + 0.1,
        emb=torch.randn(V, F_, generator=g), index=torch.randint(-2, T + 2, (B, T2), generator=g),
        ctc_targets=torch.randint(1, V, (B, max(LENGTHS3)), generator=g),
    )


def make_data(F, dim_type, batch_dim):
    """(d, x) of one framework: dims by name and the shared raws as its tensors."""
    raw = _raws()

    def tensor(r, dims, sparse_dim=None):
        if F is dt:
            return dt.Tensor(r, tuple(dims), sparse_dim=sparse_dim)
        return F.convert_to_tensor(r, dims=list(dims), sparse_dim=sparse_dim)

    d = SimpleNamespace(batch=batch_dim)
    for name, size in SIZES.items():
        if name != "batch":
            setattr(d, name, dim_type(size, name=name))

    def dynamic(name, lengths):
        return dim_type(tensor(torch.tensor(lengths, dtype=torch.int32 if F is not dt else torch.int64),
                               (d.batch,)), name=name)

    d.time, d.time2, d.samples = dynamic("time", LENGTHS), dynamic("time2", LENGTHS2), dynamic("samples", SAMPLES)
    d.time3 = dynamic("time3", LENGTHS3)
    b, t, t2, f = d.batch, d.time, d.time2, d.feature
    x = SimpleNamespace(
        x=tensor(raw.x, (b, t, f)), y=tensor(raw.y, (b, t, f)), z=tensor(raw.z, (b, t2, f)),
        q4=tensor(raw.q4, (b, t, d.heads, d.head_dim)), k4=tensor(raw.k4, (b, t2, d.heads, d.head_dim)),
        v4=tensor(raw.v4, (b, t2, d.heads, d.head_dim)), w=tensor(raw.w, (f, d.out)), bias=tensor(raw.bias, (d.out,)),
        filter=tensor(raw.filter, (d.out, f, d.k3)), labels=tensor(raw.labels, (b, t), sparse_dim=d.vocab),
        labels2=tensor(raw.labels2, (b, t2), sparse_dim=d.vocab), logits=tensor(raw.logits, (b, t, d.vocab)),
        cond=tensor(raw.cond, (b, t)), audio=tensor(raw.audio, (b, d.samples)),
        positive=tensor(raw.positive, (b, t, f)), emb=tensor(raw.emb, (d.vocab, f)),
        index=tensor(raw.index, (b, t2), sparse_dim=t),  # positions into time, some outside each sequence
        ctc_targets=tensor(raw.ctc_targets, (b, d.time3), sparse_dim=d.vocab),
    )
    return d, x


def _flat(result) -> list:
    if isinstance(result, dict):
        return [item for key in sorted(result) for item in _flat(result[key])]
    if isinstance(result, (tuple, list)):
        return [item for r in result for item in _flat(r)]
    return [result]


def _is_rf_tensor(v) -> bool:
    return hasattr(v, "raw_tensor") and hasattr(v, "dims")


def _names(d) -> dict:
    return {id(v): k for k, v in vars(d).items()}


def _order(dims, spec: tuple, names: dict, what: str) -> list:
    """Axis permutation of `dims` into the spec's order; '*' slots take unnamed dims in order."""
    have = [names.get(id(e)) for e in dims]
    if len(have) != len(spec):
        raise AssertionError(f"{what}: dims {[getattr(e, 'name', e) for e in dims]} do not fit {spec}")
    leftovers = [i for i, n in enumerate(have) if n is None or n not in spec]
    perm = []
    for name in spec:
        if name == "*":
            if not leftovers:
                raise AssertionError(f"{what}: no dim left for a '*' slot of {spec}")
            perm.append(leftovers.pop(0))
        elif name in have:
            perm.append(have.index(name))
        else:
            raise AssertionError(f"{what}: dim {name!r} missing (dims: {have})")
    return perm


def _sizes_of(rf_dim, dt_dim, rf_names: dict, dt_names: dict, what: str) -> str:
    """'' when an op-made dim has the same static size or the same lengths on both sides."""
    if dt_dim.lengths is None:
        rf_size = rf_dim.dimension
        if rf_size is None and rf_dim.dyn_size_ext is not None and rf_dim.dyn_size_ext.dims == ():
            rf_size = int(rf_dim.dyn_size_ext.raw_tensor)  # rf's dim with one size for all (e.g. packed)
        return "" if rf_size == dt_dim.size or dt_dim.size is None else f"{what}: size {dt_dim.size} vs rf's {rf_size}"
    rf_len = rf_dim.dyn_size_ext
    if rf_len is None:
        return f"{what}: has lengths {dt_dim.lengths.raw.tolist()}, rf's has size {rf_dim.dimension}"
    dt_len = dt_dim.lengths
    want = [dt_names.get(id(e)) for e in dt_len.dims]
    perm = _order(rf_len.dims, tuple(want), rf_names, what + " lengths")
    rf_raw = rf_len.raw_tensor.permute(perm) if perm else rf_len.raw_tensor
    if rf_raw.tolist() != dt_len.raw.tolist():
        return f"{what}: lengths {dt_len.raw.tolist()} vs rf's {rf_raw.tolist()}"
    return ""


def compare(program: Program, rf_result, dt_result, rf_d, dt_d) -> list:
    """Problems found (empty when the results agree on valid frames, op-made dims included)."""
    rf_items, dt_items = _flat(rf_result), _flat(dt_result)
    if len(rf_items) != len(dt_items):
        return [f"{len(dt_items)} results vs rf's {len(rf_items)}"]
    rf_names, dt_names = _names(rf_d), _names(dt_d)
    problems, specs = [], list(program.out)
    for i, (r, t) in enumerate(zip(rf_items, dt_items)):
        what = f"result {i}"
        if isinstance(t, dt.Dim):
            problems.append(_sizes_of(r, t, rf_names, dt_names, what))
            continue
        if not isinstance(t, dt.Tensor) or not _is_rf_tensor(r):
            problems.append(f"{what}: {type(t).__name__} vs rf's {type(r).__name__}")
            continue
        if not specs:
            problems.append(f"{what}: no dims spec left in `out` ({program.out})")
            continue
        spec = specs.pop(0)
        dt_perm = _order(t.dims, spec, dt_names, what)
        rf_perm = _order(r.dims, spec, rf_names, what + " (rf)")
        dt_dims = [t.dims[p] for p in dt_perm]
        for slot, (p_rf, dd) in enumerate(zip(rf_perm, dt_dims)):
            if spec[slot] == "*":
                problems.append(_sizes_of(r.dims[p_rf], dd, rf_names, dt_names, f"{what} dim {slot}"))
        a = t.raw.detach().permute(dt_perm) if dt_perm else t.raw.detach()
        b = r.raw_tensor.detach().permute(rf_perm) if rf_perm else r.raw_tensor.detach()
        extent = [dd.get_max_size() if dd.lengths is not None else a.shape[k] for k, dd in enumerate(dt_dims)]
        if any(b.shape[k] < n for k, n in enumerate(extent)):
            problems.append(f"{what}: rf's raw shape {tuple(b.shape)} is smaller than the valid extent {extent}")
            continue
        for k, n in enumerate(extent):
            a, b = a.narrow(k, 0, n), b.narrow(k, 0, n)
        mask = valid_mask(dt_dims, a.shape).expand(a.shape)
        a, b = a[mask], b[mask].to(a.dtype)
        if a.dtype == torch.bool or not (a.is_floating_point() or a.is_complex()):
            if not torch.equal(a, b):
                problems.append(f"{what}: {int((a != b).sum())} of {a.numel()} valid values differ")
        elif not torch.allclose(a, b, atol=program.atol, rtol=program.rtol, equal_nan=True):
            worst = float((a - b).abs().nan_to_num(nan=float("inf")).max())
            problems.append(f"{what}: max |diff| {worst:.3g} on valid frames (atol {program.atol}, rtol {program.rtol})")
    if specs:
        problems.append(f"`out` has {len(specs)} unused dims specs")
    return [p for p in problems if p]


def run_both(program: Program, rf, ours=dt) -> list:
    """Problems of one program (see compare) run on RETURNN frontend `rf` and on `ours` (dimtorch, or
    dimtorch.rf for programs written against rf's API); each side gets fresh dims and tensors."""
    from returnn.tensor import Dim as RfDim
    rf_d, rf_x = make_data(rf, RfDim, RfDim(SIZES["batch"], name="batch"))
    dt_d, dt_x = make_data(dt, dt.Dim, dt.Dim(None, name="batch"))
    with torch.no_grad():
        rf_result = program.runner("rf")(rf, rf_d, rf_x)
        dt_result = program.runner("dt")(ours, dt_d, dt_x)
    return compare(program, rf_result, dt_result, rf_d, dt_d)
