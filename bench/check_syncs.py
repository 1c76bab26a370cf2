"""Fails if an op of issue 4 synchronizes host and device: each runs on CUDA, forward and backward, under torch.cuda.set_sync_debug_mode("error").

Usage: python bench/check_syncs.py [--meta | --cpu] [--filter REGEX]

Passes, each op wrapped on its own so that one failure does not hide the others:
  warm-up    unchecked: CUDA context, cuBLAS/cuDNN handles, the caching allocator, and each dim's
             first device copy of its lengths and masks.
  steady     checked: the same ops on the same dims. Everything is cached: nothing may synchronize,
             and no host-to-device copy may happen at all (counted through torch.Tensor.to/copy_).
  first use  checked: the same ops on fresh dims, so the lengths go to the device for the first
             time inside the check: those copies must be non_blocking, and nothing may synchronize.
torch's sync debug mode sees blocking copies, .item(), bool() of device values, nonzero and the like
(not every possible sync: see torch.cuda.set_sync_debug_mode); the copy counter adds what it misses.

Without a CUDA device it prints "skipped: no CUDA" and exits 0. --meta is the check that needs no
GPU: the same passes on torch's "meta" device, which has no values, so any read of device data
(.item(), bool(), nonzero, a copy back to the host) raises, and the copy counter applies as on CUDA;
it cannot see syncs that only a real device has (e.g. a kernel that synchronizes internally).
--cpu runs every op on the CPU, unchecked, so that the script itself can be tested. Exit status 1
when an op synchronizes, copies in the steady pass, copies blocking in the first-use pass, or fails.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
import traceback

import torch

PASSES = ("warm-up", "steady", "first use")


class Setup:
    """Dims and inputs of one pass: a padded batch (with a length-0 sequence), parameters, and
    tensors over derived dims. Lengths live on the host; raws are made on the device directly."""

    def __init__(self, dt, device):
        self.dt, self.device = dt, device
        lengths = [5, 3, 0, 1]
        B, T, F, O = len(lengths), max(lengths) + 1, 8, 6
        self.batch = dt.Dim(None, name="batch")
        self.time = dt.Dim(dt.Tensor(torch.tensor(lengths, dtype=torch.int64), (self.batch,)), name="time")
        self.other = dt.Dim(dt.Tensor(torch.tensor([2, 2, 1, 3], dtype=torch.int64), (self.batch,)), name="other")
        self.feat = dt.Dim(F, name="feature")
        self.out = dt.Dim(O, name="out")
        self.static_time = dt.Dim(T, name="static_time")
        self.leaves = []

        def leaf(*shape, pad_rows=False):
            raw = torch.randn(*shape, device=device)
            if pad_rows:  # NaN padding, written with slices of Python ints (no device reads)
                for b, n in enumerate(lengths):
                    raw[b, n:] = math.nan
            raw.requires_grad_(True)
            self.leaves.append(raw)
            return raw

        self.x = dt.Tensor(leaf(B, T, F, pad_rows=True), (self.batch, self.time, self.feat), feature_dim=self.feat)
        self.att = dt.Tensor(leaf(B, T, pad_rows=True), (self.batch, self.time))
        self.x_static = dt.Tensor(leaf(B, T, F), (self.batch, self.static_time, self.feat), feature_dim=self.feat)
        self.bias = dt.Tensor(leaf(F), (self.feat,))
        self.w_in_out = dt.Tensor(leaf(F, O), (self.feat, self.out))
        self.w_out_in = dt.Tensor(leaf(O, F), (self.out, self.feat))
        self.b_out = dt.Tensor(leaf(O), (self.out,))
        self.gamma = dt.Tensor(leaf(F), (self.feat,))
        self.beta = dt.Tensor(leaf(F), (self.feat,))
        self.running_mean = dt.Tensor(torch.zeros(F, device=device), (self.feat,))
        self.running_var = dt.Tensor(torch.ones(F, device=device), (self.feat,))
        # Derived dims: their host lengths are computed on first use (in Setup, from get_max_size).
        self.half = self.time // 2
        self.x_half = dt.Tensor(leaf(B, self.half.get_max_size(), F), (self.batch, self.half, self.feat))


def _ops():
    """(name, fn(setup) -> result Tensors) for every op of issue 4."""
    import dimtorch as dt

    def bool_x(s):
        return s.x > 0.0

    return [
        # elementwise
        ("add/mul with broadcast", lambda s: [s.x * 2.0 + s.bias]),
        ("unary chain", lambda s: [dt.relu(dt.tanh(s.x)) + dt.exp(s.x) + dt.sigmoid(s.x)]),
        ("compare + where", lambda s: [dt.where(s.x > 0.0, s.x, 0.0)]),
        ("combine (outer)", lambda s: [dt.combine(s.att, s.bias, "mul", allow_broadcast_all_sources=True)]),
        ("cast", lambda s: [dt.cast(s.x, "float16")]),
        # masked reductions
        ("reduce_sum time", lambda s: [dt.reduce_sum(s.x, axis=s.time)]),
        ("reduce_mean time", lambda s: [dt.reduce_mean(s.x, axis=s.time)]),
        ("reduce_mean time+feature", lambda s: [dt.reduce_mean(s.x, axis=(s.time, s.feat))]),
        ("reduce_mean batch+time", lambda s: [dt.reduce_mean(s.x, axis=(s.batch, s.time))]),
        ("reduce_max time", lambda s: [dt.reduce_max(s.x, axis=s.time)]),
        ("reduce_min batch", lambda s: [dt.reduce_min(s.x, axis=s.batch)]),
        ("reduce_logsumexp time", lambda s: [dt.reduce_logsumexp(s.x, axis=s.time)]),
        ("reduce_argmax time", lambda s: [dt.reduce_argmax(s.x, axis=s.time)]),
        ("reduce_argmin time", lambda s: [dt.reduce_argmin(s.x, axis=s.time)]),
        ("reduce_any/all time", lambda s: [dt.reduce_any(bool_x(s), axis=s.time), dt.reduce_all(bool_x(s), axis=s.time)]),
        # softmax
        ("softmax time (masked)", lambda s: [dt.softmax(s.x, axis=s.time)]),
        ("log_softmax time (masked)", lambda s: [dt.log_softmax(s.x, axis=s.time)]),
        ("softmax feature", lambda s: [dt.softmax(s.x, axis=s.feat)]),
        # matmul / linear
        ("matmul feature", lambda s: [dt.matmul(s.x, s.w_in_out, reduce=s.feat)]),
        ("matmul time (use_mask)", lambda s: [dt.matmul(s.att, s.x, reduce=s.time, use_mask=True)]),
        ("dot", lambda s: [dt.dot(s.x, s.bias, reduce=s.feat)]),
        ("linear (in, out)", lambda s: [dt.linear(s.x, s.w_in_out, s.b_out)]),
        ("linear (out, in)", lambda s: [dt.linear(s.x, s.w_out_in, s.b_out)]),
        # normalization
        ("layer_norm", lambda s: [dt.layer_norm(s.x, axis=s.feat, weight=s.gamma, bias=s.beta)]),
        ("rms_norm", lambda s: [dt.rms_norm(s.x, axis=s.feat, weight=s.gamma)]),
        ("moments time", lambda s: list(dt.moments(s.x, axis=s.time))),
        ("moments batch+time", lambda s: list(dt.moments(s.x, axis=(s.batch, s.time)))),
        ("batch_norm masked (train)", lambda s: [dt.batch_norm(s.x, running_mean=s.running_mean,
                                                               running_var=s.running_var, weight=s.gamma, bias=s.beta)]),
        ("batch_norm (eval)", lambda s: [dt.batch_norm(s.x, running_mean=s.running_mean, running_var=s.running_var,
                                                       training=False)]),
        ("batch_norm fused (train)", lambda s: [dt.batch_norm(s.x_static, running_mean=s.running_mean,
                                                              running_var=s.running_var)]),
        # dropout
        ("dropout", lambda s: [dt.dropout(s.x, 0.3)]),
        ("dropout axis=feature", lambda s: [dt.dropout(s.x, 0.3, axis=s.feat)]),
        # masks and dim math
        ("copy_masked", lambda s: [s.x.copy_masked(0.0)]),
        ("sequence_mask", lambda s: [dt.sequence_mask((s.batch, s.time, s.other), device=s.device)]),
        ("get_mask / get_size_tensor", lambda s: [s.time.get_mask(device=s.device), s.time.get_size_tensor(device=s.device),
                                                  s.feat.get_size_tensor(device=s.device)]),
        ("dim math lengths + get_mask", lambda s: [(s.time + 1).get_mask(device=s.device),
                                                   dt.ceildiv(s.time, 3).get_size_tensor(device=s.device),
                                                   (s.time + s.other).get_mask(dims_order=(s.time + s.other, s.batch),
                                                                               device=s.device)]),
        ("reduce over derived dim", lambda s: [dt.reduce_mean(s.x_half, axis=s.half)]),
    ]


class CopyCounter:
    """Counts host-to-device copies made through torch.Tensor.to / copy_ / cuda (Python-level calls:
    dimtorch's lengths copies are made there), and the blocking ones among them."""

    def __init__(self):
        self.copies = self.blocking = 0
        self._saved = {}

    def _wrap(self, name):
        real = getattr(torch.Tensor, name)

        def wrapper(t, *args, **kwargs):
            out = real(t, *args, **kwargs)
            src, dst = (args[0], t) if name == "copy_" else (t, out)
            if isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and \
                    src.device.type == "cpu" and dst.device.type != "cpu":
                self.copies += 1
                non_blocking = kwargs.get("non_blocking", False) or (name == "copy_" and len(args) > 1 and args[1])
                if not non_blocking and name == "to":
                    non_blocking = any(a is True for a in args)
                if not non_blocking:
                    self.blocking += 1
            return out

        return wrapper

    def __enter__(self):
        for name in ("to", "copy_", "cuda"):
            self._saved[name] = torch.Tensor.__dict__.get(name)  # None: inherited from TensorBase
            setattr(torch.Tensor, name, self._wrap(name))
        return self

    def __exit__(self, *exc):
        for name, fn in self._saved.items():
            if fn is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, fn)
        return False


def run_op(fn, setup):
    """Forward, then backward of the sum of every floating result (non-finite values zeroed)."""
    outs = fn(setup)
    loss = None
    for o in outs:
        raw = o.raw
        if raw.is_floating_point() and raw.requires_grad:
            term = torch.nan_to_num(raw.float(), 0.0, 0.0, 0.0).sum()
            loss = term if loss is None else loss + term
    if loss is not None:
        loss.backward()
    return outs


def run_pass(name, ops, setup, checked, on_cuda, count_copies):
    """{op name: None if clean, else a message}."""
    results = {}
    for op_name, fn in ops:
        counter = CopyCounter()
        error = None
        try:
            with counter:
                if checked and on_cuda:
                    torch.cuda.set_sync_debug_mode("error")
                try:
                    run_op(fn, setup)
                finally:
                    if on_cuda:
                        torch.cuda.set_sync_debug_mode(0)
        except Exception as e:  # noqa: BLE001  (a sync error, or any failure of the op)
            error = f"{type(e).__name__}: {e}".splitlines()[0]
            frames = traceback.extract_tb(e.__traceback__)
            if frames:
                error += f"  (at {frames[-1].filename}:{frames[-1].lineno})"
        if error is None and checked and count_copies:
            if name == "steady" and counter.copies:
                error = f"{counter.copies} host-to-device copies in the steady pass (should be cached)"
            elif counter.blocking:
                error = f"{counter.blocking} blocking host-to-device copies (need non_blocking=True)"
        results[op_name] = error
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meta", action="store_true",
                        help="check on the meta device (no GPU needed): device reads raise, copies are counted")
    parser.add_argument("--cpu", action="store_true", help="run the ops on the CPU, unchecked (tests this script)")
    parser.add_argument("--filter", default="", help="regex searched in op names")
    args = parser.parse_args(argv)
    on_cuda = torch.cuda.is_available() and not args.cpu and not args.meta
    if not on_cuda and not args.cpu and not args.meta:
        print("skipped: no CUDA")
        return 0
    import dimtorch as dt

    device = torch.device("cuda", torch.cuda.current_device()) if on_cuda else \
        torch.device("meta" if args.meta else "cpu")
    count_copies = on_cuda or args.meta
    ops = [(n, f) for n, f in _ops() if re.search(args.filter, n)]
    torch.manual_seed(0)
    warm = Setup(dt, device)
    results = {"warm-up": run_pass("warm-up", ops, warm, False, on_cuda, count_copies)}
    if on_cuda:
        torch.cuda.synchronize()
    results["steady"] = run_pass("steady", ops, warm, True, on_cuda, count_copies)
    if on_cuda:
        torch.cuda.synchronize()
    fresh = Setup(dt, device)  # new dims: first device copies of lengths happen in the check
    if on_cuda:
        torch.cuda.synchronize()
    results["first use"] = run_pass("first use", ops, fresh, True, on_cuda, count_copies)
    if on_cuda:
        torch.cuda.synchronize()

    where = f"CUDA ({torch.cuda.get_device_name(device)})" if on_cuda else \
        "meta (--meta: device reads raise, copies counted)" if args.meta else "CPU (--cpu: unchecked)"
    print(f"dimtorch sync check on {where}, torch {torch.__version__}")
    width = max(len(n) for n, _ in ops)
    print(f"{'op':<{width}}  " + "  ".join(f"{p:<9}" for p in PASSES))
    failed = []
    for op_name, _ in ops:
        cells = []
        for p in PASSES:
            err = results[p][op_name]
            cells.append("ok" if err is None else "FAIL")
            if err is not None:
                failed.append((op_name, p, err))
        print(f"{op_name:<{width}}  " + "  ".join(f"{c:<9}" for c in cells))
    for op_name, p, err in failed:
        print(f"FAIL {op_name} [{p}]: {err}")
    print(f"{len(ops)} ops, {len(failed)} failures" + ("" if count_copies else " (no sync check on CPU)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
