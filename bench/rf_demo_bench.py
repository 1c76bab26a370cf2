"""RETURNN's demo-rf-pt-benchmark.py on dimtorch.rf beside RETURNN frontend: the demo's loss at the same
weights, its training step in eager mode, its eager beam search (`check`), and its training step timed
(`bench`): dimtorch.rf vs RETURNN frontend (PyTorch backend, newest behaviour version), and beside them
demo/'s joint CTC + attention model written with dimtorch's own API (`--decoder aed`: the closest model
of ours; another decoder, see below).

RETURNN's demos are not part of its PyPI package and their code does not enter this repository: pass the
file from a RETURNN checkout (`--demo PATH` or $RETURNN_DEMO_RF_PT). It is imported twice, as written
(RETURNN) and with only its import lines edited (returnn.frontend -> dimtorch.rf, returnn.tensor ->
dimtorch.rf.tensor, in memory), both in this one process (separate packages); their Model, train_step and
forward_step run as the demo defines them. The driver around them replaces RETURNN's engine, as the
demo's own `_custom_loop` does (which fails on RETURNN itself on its first batch: KeyError 'classes'):

  per step: zero_grad; the batch bound to the extern data (RETURNN: raw_dict_to_extern_data with the eval
  targets; dimtorch.rf: dimtorch.rf.runner.bind_batch, the declared dims' dyn_size_ext per batch);
  init_train_step_run_ctx(train_flag=True); train_step; get_run_ctx().total_loss() backward; Adam step.

The task is the demo's (binary digits in, their decimal digits out: at most 8 input and 3 output frames),
made here with numpy (seeded; the same batches for every implementation). Configs: `tiny` (2 encoder
layers of 64, ff 128, 4 heads), `small` (4 layers of 128, ff 512), `demo` (the demo's 12 x 512). The
demo's decoder sizes are literals in its Model (640, 1024, 1024; ~9 M parameters whatever the encoder);
`--dec-dims e,l,r` rebinds them (the module's global `Dim` replaced by a factory; the file unchanged) to
get an overhead-bound step.

The beam search: the demo's forward_step fails on RETURNN as written (its beam of 12 is larger than the
11 classes; data.remaining_dims((spatial, feature_dim)) with a sparse input's feature_dim None); `check`
runs it with RETURNN's own workarounds: vocabulary 16 (rebinding the dataset-dependent globals) and
longer inputs (up to 30 digits, so the 6x downsampled encoder has up to 5 frames). dimtorch.rf accepts
None in remaining_dims, so the file itself stays unchanged on our side.

    python bench/rf_demo_bench.py check --demo ~/returnn/demos/demo-rf-pt-benchmark.py
    python bench/rf_demo_bench.py bench --config tiny --dec-dims 64,128,128 --batch 8 --rounds 30
    python bench/rf_demo_bench.py bench --config small --batch 32 --rounds 12
    python bench/rf_demo_bench.py bench --config tiny --dec-dims 64,128,128 --batch 8 --rounds 20 --warmup 4 \
        --compiled --backend aot_eager --memory     # + dimtorch.rf compiled, + peak memory per implementation

Timing (docs/architecture.md, How we measure): CPU, one torch thread; per round each implementation, in an
order that rotates per round, runs a block of training steps on that round's batches (`--block`, 5) after a
full garbage collection (so that neither collects the other's garbage in its steps). A block's first step is
not timed: it starts with the caches full of the collection's and the other implementation's work, which a
training loop never has; each implementation's own automatic collections fall in its timed steps, as in
training. Reported: the median wall and process-CPU time of a timed step, and the median over rounds of the
ratio of the timed steps' total to RETURNN's, with the 1-minute load. `--block 1` is the method before
2026-12-05: one step each, timed right after a full collection and the other implementation's step, i.e.
from cold caches (the small configuration's ratio 0.51 where blocks give 0.48; docs/porting_from_returnn.md).
`--device cuda` runs both frontends' steps on the GPU (the batch bound there, each step followed by a
synchronize, so that its wall time holds its kernels): the wall ratio is the one to read there.
The dimtorch own-API column trains demo/dimtorch_model.py's Conformer + CTC with its Transformer
attention decoder (2 layers; a different decoder from the demo's LSTM + MLP attention through rf.scan) on
features of the same batch shapes: an indication of where dimtorch's own API stands, not the same model.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import os
import re
import statistics
import sys
import time
import types
from pathlib import Path

import numpy

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from opsbench.timing import quartiles, round_ratios  # noqa: E402

CONFIGS = {
    "micro": dict(num_enc_layers=1, enc=32, ff=64, heads=2, key_total=32),  # the compile test's (cheapest graph)
    "tiny": dict(num_enc_layers=2, enc=64, ff=128, heads=4, key_total=64),
    "small": dict(num_enc_layers=4, enc=128, ff=512, heads=4, key_total=128),
}
_IMPORT = re.compile(r"^\s*(import|from)\s+returnn\.(frontend|tensor|torch\.frontend)\b")


def edit_imports(source: str) -> str:
    """The porting edit (docs/porting_from_returnn.md): on import lines only, returnn.frontend
    (and returnn.torch.frontend) -> dimtorch.rf and returnn.tensor -> dimtorch.rf.tensor."""
    lines = []
    for line in source.splitlines(keepends=True):
        if _IMPORT.match(line):
            line = re.sub(r"\breturnn\.torch\.frontend\b", "dimtorch.rf", line)
            line = re.sub(r"\breturnn\.frontend\b", "dimtorch.rf", line)
            line = re.sub(r"\breturnn\.tensor\b", "dimtorch.rf.tensor", line)
        lines.append(line)
    return "".join(lines)


def make_batch(rng: numpy.random.RandomState, batch: int, *, out_base: int = 10, min_len: int = 1,
               max_len: int = 8) -> dict:
    """The demo's task: a binary number of min_len..max_len digits in, its digits in out_base out (padded
    int32 raws, int32 lengths, RETURNN's "name:seq_len" keys)."""
    ins, outs = [], []
    for _ in range(batch):
        digits = [int(rng.randint(0, 2)) for _ in range(rng.randint(min_len, max_len + 1))]
        number, out = int("".join(map(str, digits)), 2), []
        while number:
            out.insert(0, number % out_base)
            number //= out_base
        ins.append(digits)
        outs.append(out or [0])
    in_lens = numpy.array([len(s) for s in ins], dtype="int32")
    out_lens = numpy.array([len(s) for s in outs], dtype="int32")
    x = numpy.zeros((batch, in_lens.max()), dtype="int32")
    y = numpy.zeros((batch, out_lens.max()), dtype="int32")
    for i, (a, b) in enumerate(zip(ins, outs)):
        x[i, : len(a)] = a
        y[i, : len(b)] = b
    return {"data": x, "data:seq_len": in_lens, "classes": y, "classes:seq_len": out_lens}


def load_demo(path: str, impl: str, *, vocab: int = 10, dec_dims: str | None = None) -> types.ModuleType:
    """The demo file as a module ("returnn": as written, "dimtorch": imports edited); its __main__ part does
    not run. vocab != 10 rebinds its dataset-dependent globals, dec_dims its three literal decoder sizes."""
    source = Path(path).read_text()
    if impl == "dimtorch":
        source = edit_imports(source)
    mod = types.ModuleType(f"demo_rf_pt_benchmark_{impl}")
    mod.__file__ = path
    sys.modules[mod.__name__] = mod
    exec(compile(source, path, "exec"), mod.__dict__)
    if vocab != mod.targets_dim.dimension:
        mod.targets_dim = mod.Dim(vocab, name="vocab")
        mod.extern_data[mod.extern_data_targets_name]["sparse_dim"] = mod.targets_dim
        mod.targets_ext_dim = mod.targets_dim + 1
        mod.targets_eos_idx = mod.targets_ext_dim.dimension - 1
    if dec_dims:
        sizes = dict(zip(("target_embed", "lstm", "readout"), (int(x) for x in dec_dims.split(","))))
        real_dim = mod.Dim

        def dim_factory(*args, **kwargs):
            if kwargs.get("name") in sizes and "dimension" in kwargs and not args:
                kwargs["dimension"] = sizes[kwargs["name"]]
            return real_dim(*args, **kwargs)

        dim_factory.Types = real_dim.Types
        mod.Dim = dim_factory
    return mod


def make_get_model(demo, config: str):
    """get_model for a config (the demo's encoder options), "demo" the demo's own."""
    if config == "demo":
        return demo.get_model
    c = CONFIGS[config]
    Dim, rf = demo.Dim, demo.rf

    def get_model(**_kwargs):
        return demo.Model(
            in_dim=demo.data_feature_dim, encoder_in_dim=demo.encoder_in_dim, num_enc_layers=c["num_enc_layers"],
            enc_model_dim=Dim(name="enc", dimension=c["enc"], kind=Dim.Types.Feature),
            enc_ff_dim=Dim(name="enc-ff", dimension=c["ff"], kind=Dim.Types.Feature),
            enc_att_num_heads=c["heads"],
            enc_conformer_layer_opts=dict(
                conv_norm_opts=dict(use_mask=True),
                self_att_opts=dict(with_bias=False, with_linear_pos=False, with_pos_bias=False,
                                   learnable_pos_emb=True, separate_pos_emb_per_head=False),
                ff_activation=lambda x: rf.relu(x) ** 2.0),
            enc_key_total_dim=Dim(name="enc_key_total_dim", dimension=c["key_total"]),
            target_dim=demo.targets_ext_dim, bos_idx=demo.targets_eos_idx, eos_idx=demo.targets_eos_idx)

    return get_model


class RfSide:
    """One frontend running the demo: its module, model, torch module, Adam, and the batch binding."""

    def __init__(self, impl: str, demo_path: str, *, config: str, vocab: int = 10, dec_dims=None, seed: int = 1,
                 device: str = "cpu"):
        import torch

        self.impl, self.device = impl, device
        self.demo = demo = load_demo(demo_path, impl, vocab=vocab, dec_dims=dec_dims)
        self.rf = rf = demo.rf
        self.behavior_version = None
        if impl == "returnn":
            from returnn.torch.data import extern_data as extern_data_util
            from returnn.torch.frontend.bridge import rf_module_to_pt_module
            from returnn.util.basic import BehaviorVersion

            rf.select_backend_torch()
            if not BehaviorVersion.is_set():
                BehaviorVersion.set(BehaviorVersion._latest_behavior_version)
            self.behavior_version = BehaviorVersion.get()
            rf.set_random_seed(seed)
            self.model = make_get_model(demo, config)()
            self.pt_model = rf_module_to_pt_module(self.model).to(device)
            template = extern_data_util.extern_data_template_from_config_opts(demo.extern_data)

            def bind(batch):
                raw = {k: torch.tensor(v) for k, v in batch.items()}
                raw["seq_tag"] = numpy.array([f"seq-{i}" for i in range(len(batch["data"]))])
                return extern_data_util.raw_dict_to_extern_data(raw, extern_data_template=template, device=device,
                                                                with_eval_targets=True)
        else:
            from dimtorch.rf import runner

            torch.manual_seed(seed)
            self.model = make_get_model(demo, config)()
            self.pt_model = self.model.to(device)  # dimtorch.rf's Module is a torch.nn.Module
            template = runner.make_extern_data(demo)

            def bind(batch):
                return runner.bind_batch(template, {k: torch.from_numpy(v) for k, v in batch.items()}, device=device)
        self.bind = bind
        self.optimizer = torch.optim.Adam(self.pt_model.parameters(), lr=demo.config["learning_rate"])
        self.n_params = sum(p.numel() for p in self.pt_model.parameters())

    def _device_ctx(self):
        return self.rf.set_default_device_ctx(self.device)

    def losses(self, batch, *, train_flag: bool) -> dict:
        extern_data = self.bind(batch)
        self.rf.init_train_step_run_ctx(train_flag=train_flag, step=0, epoch=1)
        with self._device_ctx():
            self.demo.train_step(model=self.model, extern_data=extern_data)
        ctx = self.rf.get_run_ctx()
        res = {"total": float(ctx.total_loss().raw_tensor.detach())}
        for name, loss in ctx.losses.items():
            res[f"{name}:summed"] = float(loss.get_summed_loss().raw_tensor.detach())
            res[f"{name}:mean"] = float(loss.get_mean_loss().raw_tensor.detach())
        return res

    def train_step(self, batch, step: int):
        self.optimizer.zero_grad()
        extern_data = self.bind(batch)
        self.rf.init_train_step_run_ctx(train_flag=True, step=step, epoch=1)
        with self._device_ctx():
            self.demo.train_step(model=self.model, extern_data=extern_data)
        total = self.rf.get_run_ctx().total_loss()
        total.raw_tensor.backward()
        self.optimizer.step()
        return total.raw_tensor.detach()

    def beam_search(self, batch):
        import torch

        extern_data = self.bind(batch)
        self.rf.init_forward_step_run_ctx(epoch=1, step=0)
        self.pt_model.eval()
        try:
            with torch.no_grad(), self._device_ctx():
                return self.demo.forward_step(model=self.model, extern_data=extern_data)
        finally:
            self.pt_model.train()


class CompiledRfSide:
    """dimtorch.rf running the demo's train_step under torch.compile(fullgraph=True, dynamic=True): the step
    function (train_step, then the run context's total loss) is compiled; binding the batch (extern data), the
    run context, backward and Adam stay outside it, as in RfSide.train_step. `graphs` counts the graphs
    (Dynamo frames: one per compile, fullgraph allows no break), `compile_s` the wall time of the steps that
    compiled (their step time included)."""

    impl = "dimtorch_compiled"

    def __init__(self, demo_path: str, *, config: str, vocab: int = 10, dec_dims=None, seed: int = 1,
                 backend: str = "aot_eager"):
        import torch
        import torch._dynamo.testing

        self.side = side = RfSide("dimtorch", demo_path, config=config, vocab=vocab, dec_dims=dec_dims, seed=seed)
        self.rf, self.pt_model, self.n_params, self.backend = side.rf, side.pt_model, side.n_params, backend
        if backend == "inductor":  # demo/train.py's settings (demo/compiling.py): fallback_random among them,
            # without which inductor's own random numbers fail over the front end's 6x subsampled time (torch 2.13)
            from demo.compiling import apply_compile_settings
            apply_compile_settings()
        self.counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
        self.compiled = torch.compile(self.loss_of, fullgraph=True, dynamic=True, backend=self.counter)
        self.compile_s = 0.0

    def loss_of(self, extern_data):
        """The demo's train_step and the total loss's raw (what is compiled)."""
        self.side.demo.train_step(model=self.side.model, extern_data=extern_data)
        return self.rf.get_run_ctx().total_loss().raw_tensor

    @property
    def graphs(self) -> int:
        """Compiled graphs of the step function (Dynamo's cache entries for it: one per compile)."""
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
        return len(_debug_get_cache_entry_list(CompiledRfSide.loss_of.__code__))

    compiles = graphs

    def loss(self, batch, step: int, *, train_flag: bool = True, compiled: bool = True):
        """The step's loss (raw, differentiable) on `batch`, compiled or eager (the same model)."""
        import torch.fx.experimental._config as fx_config

        extern_data = self.side.bind(batch)
        self.rf.init_train_step_run_ctx(train_flag=train_flag, step=step, epoch=1)
        # torch specialises an input size of 1 (its 0/1 specialisation: a batch whose targets or encoder have
        # 1 frame compiled a graph of its own); size-oblivious sizes keep them symbolic, which is what dims
        # mean (a dimtorch op never broadcasts a dynamic dim of size 1). Read while tracing, so set per call.
        # Not with inductor (torch 2.13): there AOTAutograd cannot tell a saved activation's symbolic stride
        # from inductor's reported one (evaluated to the first batch's ints) under size-oblivious sizes, and
        # bakes those ints into the backward graph, which then fails the next batch with other sizes ("expected
        # size 8==8, stride 4==3"; torch PR 194420 keeps them symbolic). Without it, a few graphs more.
        oblivious = self.backend != "inductor"
        with self.side._device_ctx(), fx_config.patch(backed_size_oblivious=oblivious):
            return (self.compiled if compiled else self.loss_of)(extern_data)

    def train_step(self, batch, step: int):
        self.side.optimizer.zero_grad()
        graphs, t0 = self.graphs, time.perf_counter()
        loss = self.loss(batch, step)
        loss.backward()
        self.side.optimizer.step()
        if self.graphs != graphs:
            self.compile_s += time.perf_counter() - t0
        return loss.detach()


class OwnApiSide:
    """demo/dimtorch_model.py's Conformer + CTC with its attention decoder (dimtorch's own API), sized like
    the config's encoder, trained on features of the batch's shapes (80 per frame) and its labels."""

    impl = "dimtorch_own"

    def __init__(self, config: str, *, seed: int = 1):
        import torch

        from demo.dimtorch_model import DimtorchConformerCTC
        from demo.reference_model import DecoderConfig, ModelConfig

        c = CONFIGS["small" if config == "demo" else config]
        cfg = ModelConfig(in_dim=80, num_labels=10, model_dim=c["enc"], num_layers=c["num_enc_layers"],
                          num_heads=c["heads"], ff_dim=c["ff"], conv_kernel_size=31, subsample_channels=(32, 64))
        torch.manual_seed(seed)
        self.model = DimtorchConformerCTC(cfg, decoder=DecoderConfig(ff_dim=c["ff"]))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=5e-4)
        self.n_params = sum(p.numel() for p in self.model.parameters())
        self.rng = torch.Generator().manual_seed(seed)

    def train_step(self, batch, step: int):
        import torch

        self.optimizer.zero_grad()
        in_lens = torch.from_numpy(batch["data:seq_len"]).long()
        feats = torch.randn(len(in_lens), int(in_lens.max()) * 4, 80, generator=self.rng)
        loss, _, _ = self.model.loss(feats, in_lens * 4, torch.from_numpy(batch["classes"]).long(),
                                     torch.from_numpy(batch["classes:seq_len"]).long())
        loss.backward()
        self.optimizer.step()
        return loss.detach()


def _demo_path(args) -> str:
    path = args.demo or os.environ.get("RETURNN_DEMO_RF_PT")
    if not path or not os.path.exists(path):
        raise SystemExit("bench/rf_demo_bench.py: give RETURNN's demos/demo-rf-pt-benchmark.py from a RETURNN checkout "
                         "(--demo PATH or $RETURNN_DEMO_RF_PT); it is not part of RETURNN's PyPI package")
    return path


@contextlib.contextmanager
def _returnn_remaining_dims_skips_none():
    """RETURNN's Tensor.remaining_dims raising for None in its argument (the demo's forward_step passes a sparse
    input's feature_dim, None): skipped for the duration, RETURNN patched (never the demo file)."""
    from returnn.tensor import Tensor

    orig = Tensor.remaining_dims

    def remaining_dims(self, remove=None):
        if remove is not None and isinstance(remove, (list, tuple)):
            remove = [d for d in remove if d is not None]
        return orig(self, remove)

    Tensor.remaining_dims = remaining_dims
    try:
        yield
    finally:
        Tensor.remaining_dims = orig


@contextlib.contextmanager
def _nothing():
    yield


def _hypotheses(hyps, log_probs, out_spatial_dim, beam_dim, seconds) -> dict:
    """Per sequence and beam entry: the labels (valid frames), lengths and log probs, as lists, batch first."""
    batch = [d for d in log_probs.dims if d is not beam_dim][0]
    order = [batch, beam_dim]
    lengths = out_spatial_dim.dyn_size_ext.copy_transpose(order).raw_tensor.tolist()
    raw = hyps.copy_transpose(order + [out_spatial_dim]).raw_tensor.tolist()
    labels = [[row[:n] for row, n in zip(rows, ns)] for rows, ns in zip(raw, lengths)]
    return {"beam": beam_dim.dimension, "hyps": labels, "lengths": lengths, "seconds": seconds,
            "log_probs": log_probs.copy_transpose(order).raw_tensor.tolist()}


def cmd_check(args) -> dict:
    """6b: the same weights give the same loss; training steps run; the beam search gives hypotheses."""
    import torch

    torch.set_num_threads(args.threads)
    path = _demo_path(args)
    ret = RfSide("returnn", path, config=args.config, seed=args.seed, device=args.device)
    ours = RfSide("dimtorch", path, config=args.config, seed=args.seed, device=args.device)
    state = ret.pt_model.state_dict()
    mine = ours.pt_model.state_dict()
    diff = sorted(set(state) ^ set(mine))
    shapes = [k for k in state if k in mine and state[k].shape != mine[k].shape]
    if diff or shapes:
        raise SystemExit(f"parameter names or shapes differ: names {diff}, shapes {shapes}")
    ours.pt_model.load_state_dict(state)
    batch = make_batch(numpy.random.RandomState(1234), args.batch)
    ref = ret.losses(batch, train_flag=False)
    got = ours.losses(batch, train_flag=False)
    report = {"parameters": len(state), "returnn": ref, "dimtorch_rf": got,
              "abs_diff": {k: abs(got[k] - ref[k]) for k in ref if k in got}}
    ok = all(v <= 1e-4 for v in report["abs_diff"].values()) and set(ref) == set(got)
    print(f"loss at RETURNN's initial weights ({len(state)} tensors), train flag off, batch {args.batch}:\n"
          f"  RETURNN     {json.dumps(ref)}\n  dimtorch.rf {json.dumps(got)}\n  -> {'equal' if ok else 'DIFFERENT'} "
          f"at 1e-4 (max |diff| {max(report['abs_diff'].values()):.2e})")
    rng = numpy.random.RandomState(args.seed)
    losses = [float(ours.train_step(make_batch(rng, args.batch), step)) for step in range(args.steps)]
    print(f"dimtorch.rf: {args.steps} training steps in eager mode, losses {[round(x, 3) for x in losses]}")
    report["train_losses"] = losses
    # the beam search, with what RETURNN itself needs to run it (vocabulary 16, longer inputs; RETURNN's
    # Tensor.remaining_dims skipping None, patched here for RETURNN only), at the same weights on both
    ret_beam = RfSide("returnn", path, config=args.config, vocab=16, seed=args.seed, device=args.device)
    our_beam = RfSide("dimtorch", path, config=args.config, vocab=16, seed=args.seed, device=args.device)
    our_beam.pt_model.load_state_dict(ret_beam.pt_model.state_dict())
    b = make_batch(numpy.random.RandomState(7), 8, out_base=16, min_len=12, max_len=30)
    found = {}
    for side in (ret_beam, our_beam):
        with _returnn_remaining_dims_skips_none() if side.impl == "returnn" else _nothing():
            t0 = time.perf_counter()
            hyps, log_probs, out_spatial_dim, beam_dim = side.beam_search(b)
            seconds = time.perf_counter() - t0
        found[side.impl] = _hypotheses(hyps, log_probs, out_spatial_dim, beam_dim, seconds)
    ours_, ref_ = found["dimtorch"], found["returnn"]
    same = (ours_["hyps"] == ref_["hyps"] and ours_["lengths"] == ref_["lengths"] and
            numpy.allclose(ours_["log_probs"], ref_["log_probs"], atol=1e-4, rtol=1e-4))
    print(f"beam search (beam {ours_['beam']}, batch 8, vocabulary 16), the same weights on both: dimtorch.rf "
          f"{ours_['seconds']:.2f} s, RETURNN {ref_['seconds']:.2f} s; hypotheses, lengths and log probs "
          f"{'equal' if same else 'DIFFERENT'}; best per sequence (dimtorch.rf): "
          f"{[h[0][:n[0]] for h, n in zip(ours_['hyps'], ours_['lengths'])]}, log probs "
          f"{[round(p[0], 3) for p in ours_['log_probs']]}")
    report["beam"] = {"dimtorch_rf": ours_, "returnn": ref_, "equal": same}
    report["equal"] = ok and same
    return report


def cmd_bench(args) -> dict:
    """6c: training steps interleaved, RETURNN vs dimtorch.rf (vs dimtorch's own API)."""
    import torch

    torch.set_num_threads(args.threads)
    path = _demo_path(args)
    if args.device != "cpu" and (args.own_api or args.compiled):
        raise SystemExit("bench/rf_demo_bench.py: --own-api and --compiled run on the CPU only")
    if args.block < 1:
        raise SystemExit("bench/rf_demo_bench.py: --block must be at least 1")
    sides = [RfSide(impl, path, config=args.config, dec_dims=args.dec_dims, seed=args.seed, device=args.device)
             for impl in ("returnn", "dimtorch")]
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    if args.own_api:
        sides.append(OwnApiSide(args.config, seed=args.seed))
    if args.compiled:
        sides.append(CompiledRfSide(path, config=args.config, dec_dims=args.dec_dims, seed=args.seed,
                                    backend=args.backend))
    rng = numpy.random.RandomState(args.seed)
    graphs_after_warmup = 0
    wall = {s.impl: [] for s in sides}
    cpu = {s.impl: [] for s in sides}
    loads = []
    timed = max(args.block - 1, 1)  # a block's first step is not timed when it has others (see the docstring)
    for r in range(args.warmup + args.rounds):
        batches = [make_batch(rng, args.batch) for _ in range(args.block)]
        order = sides[r % len(sides):] + sides[:r % len(sides)]
        for s in order:
            gc.collect()  # the other frontend's garbage is not collected in this one's steps
            spent = []
            for j, batch in enumerate(batches):
                sync()
                c0, t0 = time.process_time(), time.perf_counter()
                s.train_step(batch, r * args.block + j)
                sync()
                spent.append((time.perf_counter() - t0, time.process_time() - c0))
            if r >= args.warmup:
                wall[s.impl].append([w for w, _ in spent[-timed:]])
                cpu[s.impl].append([c for _, c in spent[-timed:]])
        if r >= args.warmup:
            loads.append(os.getloadavg()[0])
        if r == args.warmup - 1:
            graphs_after_warmup = sum(s.graphs for s in sides if isinstance(s, CompiledRfSide))
    res = {"device": args.device if args.device == "cpu" else f"{args.device} ({torch.cuda.get_device_name()})",
           "config": args.config, "dec_dims": args.dec_dims or "640,1024,1024 (the demo's)", "batch": args.batch,
           "rounds": args.rounds, "threads": torch.get_num_threads(),
           "params": {s.impl: s.n_params for s in sides},
           "returnn_behavior_version": sides[0].behavior_version,
           "block": args.block, "timed_steps_per_round": timed,
           "wall_ms": {k: _median_step(v) * 1e3 for k, v in wall.items()},
           "cpu_ms": {k: _median_step(v) * 1e3 for k, v in cpu.items()},
           "load_1min": [min(loads), statistics.median(loads), max(loads)]}
    for s in sides[1:]:
        res[f"ratio_wall_{s.impl}"] = quartiles(round_ratios(_sums(wall[s.impl]), _sums(wall["returnn"])))
        res[f"ratio_cpu_{s.impl}"] = quartiles(round_ratios(_sums(cpu[s.impl]), _sums(cpu["returnn"])))
    for s in sides:
        if isinstance(s, CompiledRfSide):
            res["compiled"] = {"backend": s.backend, "graphs": s.graphs, "compile_s": round(s.compile_s, 1),
                               "graphs_in_timed_rounds": "none" if s.graphs == graphs_after_warmup else
                               s.graphs - graphs_after_warmup}
            res["ratio_wall_dimtorch_compiled_vs_eager"] = quartiles(round_ratios(_sums(wall[s.impl]),
                                                                                 _sums(wall["dimtorch"])))
    if args.memory:
        res["peak_rss_mib"] = {impl: _memory_of(args, impl) for impl in wall}
    print(json.dumps(res, indent=1))
    return res


def _median_step(rounds: list) -> float:
    """The median time of one timed step over all rounds' blocks."""
    return statistics.median(t for block in rounds for t in block)


def _sums(rounds: list) -> list:
    """Each round's timed steps' total time."""
    return [sum(block) for block in rounds]


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def _memory_of(args, impl: str) -> dict:
    """The memory of `impl`'s training steps in a process of its own (`memstep`): the resident set after
    the model, the warmup steps (and, compiled, the compiles), and the peak resident set during the timed
    steps (Linux's VmHWM, reset after the warmup), in MiB."""
    import subprocess
    cmd = [sys.executable, __file__, "memstep", "--impl", impl, "--config", args.config, "--batch", str(args.batch),
           "--rounds", str(min(args.rounds, 5)), "--warmup", str(max(args.warmup, 2)), "--threads", str(args.threads),
           "--seed", str(args.seed), "--backend", args.backend, "--demo", _demo_path(args)]
    if args.dec_dims:
        cmd += ["--dec-dims", args.dec_dims]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        return {"error": run.stderr[-500:]}
    return json.loads(run.stdout.strip().splitlines()[-1])


def cmd_memstep(args) -> dict:
    """One implementation's steps in this process, for _memory_of (prints one JSON line)."""
    import torch

    torch.set_num_threads(args.threads)
    path = _demo_path(args)
    if args.impl == "dimtorch_compiled":
        side = CompiledRfSide(path, config=args.config, dec_dims=args.dec_dims, seed=args.seed, backend=args.backend)
    elif args.impl == "dimtorch_own":
        side = OwnApiSide(args.config, seed=args.seed)
    else:
        side = RfSide(args.impl, path, config=args.config, dec_dims=args.dec_dims, seed=args.seed)
    rng = numpy.random.RandomState(args.seed)
    batches = [make_batch(rng, args.batch) for _ in range(args.warmup + args.rounds)]
    model_kib = _rss_kib("VmRSS")
    for r in range(args.warmup):
        side.train_step(batches[r], r)
    gc.collect()
    warm_kib = _rss_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    for r in range(args.warmup, args.warmup + args.rounds):
        side.train_step(batches[r], r)
    peak_kib = _rss_kib("VmHWM")
    res = {"after_model": round(model_kib / 1024, 1), "after_warmup": round(warm_kib / 1024, 1),
           "peak_in_steps": round(peak_kib / 1024, 1), "step_peak_over_warm": round((peak_kib - warm_kib) / 1024, 1)}
    print(json.dumps(res))
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=["check", "bench", "memstep"])
    ap.add_argument("--demo", default=None, help="RETURNN's demos/demo-rf-pt-benchmark.py (or $RETURNN_DEMO_RF_PT)")
    ap.add_argument("--config", default="tiny", choices=["micro", "tiny", "small", "demo"])
    ap.add_argument("--dec-dims", default=None, help="'embed,lstm,readout' instead of the demo's 640,1024,1024")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3, help="check: training steps")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--block", type=int, default=5,
                    help="bench: training steps per implementation and round, the first not timed when more than one "
                         "(1: one step each, timed right after the other implementation's and a full collection)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="check and bench: the device of both frontends' steps (e.g. "
                    "cuda; bench's wall times then include a synchronize after each step)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--own-api", action="store_true", help="bench: also demo/'s dimtorch model (--decoder aed)")
    ap.add_argument("--compiled", action="store_true",
                    help="bench: also dimtorch.rf's step under torch.compile (fullgraph, dynamic)")
    ap.add_argument("--backend", default="aot_eager", help="the torch.compile backend of --compiled")
    ap.add_argument("--memory", action="store_true",
                    help="bench: also each implementation's peak resident set in steps, in a process of its own")
    ap.add_argument("--impl", default="dimtorch", help="memstep: returnn, dimtorch, dimtorch_compiled, dimtorch_own")
    ap.add_argument("--out", default=None, help="write the result as JSON here")
    args = ap.parse_args(argv)
    res = {"check": cmd_check, "bench": cmd_bench, "memstep": cmd_memstep}[args.cmd](args)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
