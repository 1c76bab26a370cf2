"""torch.compile settings for the demo's training step (demo/train.py --compile, bench/train_compile.py,
the tests), the same for dimtorch's model and the hand-written reference.

With torch 2.13's inductor on the CPU, the Conformer's step compiles to one graph with dynamic sizes
(every later batch shape reuses it) only with these; each was found by TORCH_LOGS=recompiles:
- the conv backward's lowering fixes the strides of its gradients as ints (`guard_int_seq`), so every new
  padded time size recompiled: it runs as the ATen kernel it would choose on the CPU anyway, without those
  guards;
- layout optimization (convolutions in channels-last) adds guards on the conv front end's sizes;
- duck sizing assumes two sizes that happen to be equal in the first batch (e.g. 3 sequences and 3
  labels) are always equal, which recompiles on the next batch;
- Python floats read from modules (dropout rates, eps, batch norm's momentum) are symbolic floats under
  dynamic=True (specialize_float is off by default): the trace carries their sympy expressions, and when a
  float cannot be turned into a graph input (the momentum) Dynamo restarts its analysis and traces the
  whole model again. Specialized, they are constants (a changed rate recompiles): the tiny model's compile
  took 32 CPU-s instead of 48, one trace instead of two;
- inductor's own random numbers (dropout) fail over a size made by floor division (the front end's
  T // 4, "ValueRangeError: Invalid ranges"): torch's kernels draw them instead (`fallback_random`).
"""
from __future__ import annotations

from typing import Callable, List


def apply_compile_settings() -> Callable[[], None]:
    """Applies the settings above (process-wide); returns a function that restores what was there."""
    import torch
    import torch.fx.experimental._config as fx_config
    from torch._inductor import config as inductor_config
    from torch._inductor import lowering

    undo: List[Callable[[], None]] = []

    def set_attr(obj, name, value):
        old = getattr(obj, name)
        setattr(obj, name, value)
        undo.append(lambda: setattr(obj, name, old))

    set_attr(inductor_config, "fallback_random", True)
    set_attr(inductor_config, "layout_optimization", False)
    set_attr(fx_config, "use_duck_shape", False)
    set_attr(torch._dynamo.config, "specialize_float", True)
    try:
        from torch._inductor.kernel.conv import aten_convolution_backward_fallback
    except ImportError:  # another torch: its own lowering
        aten_convolution_backward_fallback = None
    if aten_convolution_backward_fallback is not None:
        op = torch.ops.aten.convolution_backward.default
        old = lowering.lowerings.get(op)
        lowering.lowerings[op] = aten_convolution_backward_fallback
        undo.append(lambda: lowering.lowerings.__setitem__(op, old) if old is not None else lowering.lowerings.pop(op))

    def restore():
        while undo:
            undo.pop()()
    return restore
