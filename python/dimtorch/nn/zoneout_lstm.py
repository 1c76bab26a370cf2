"""ZoneoutLSTM (RETURNN frontend's): an LSTM run frame by frame whose cell and hidden state keep their previous
values at random units in training (zoneout) and a fixed mix of previous and new values in eval."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .._core import in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor, zeros
from .._core.args import dim_str, dims_str
from . import init as _init
from .linear import check_in_dim
from .module import Module, Parameter
from .recurrent import LstmState, batch_layout

__all__ = ["ZoneoutLSTM"]


def _zoneout(prev: torch.Tensor, cur: torch.Tensor, factor: float, keep: Optional[torch.Tensor]) -> torch.Tensor:
    """rf's zoneout: in training each unit keeps prev with probability factor (dropout of the update
    cur - prev, rescaled back: cur where `keep`, drawn with probability 1 - factor, else prev), in eval
    (keep None) the expectation (1 - factor) * cur + factor * prev."""
    if factor == 0.0:
        return cur
    if keep is not None:
        return torch.where(keep, cur, prev)
    return (1 - factor) * cur + factor * prev


def _shaped(raw: torch.Tensor, shape: list) -> torch.Tensor:
    """raw reshaped to `shape` (-1 at most once), or raw itself when it has that shape already: a reshape to
    the same shape is still a view op and, with grad, a node (one step of a scan: ~6 of them a call)."""
    if len(shape) == raw.dim() and all(s == -1 or s == r for s, r in zip(shape, raw.shape)):
        return raw
    return raw.reshape(shape)


class ZoneoutLSTM(Module):
    """One LSTM layer in_dim -> out_dim with zoneout (RETURNN frontend's ZoneoutLSTM and its parameters):
    `ff_weight` (4·out, in), `rec_weight` (4·out, out), both Glorot, `bias` (4·out,), zeros (with_bias).
    The gate dim is split in `parts_order` (default "ifco", torch's order: input, forget, cell input (c, g or
    j), output). c' = sigmoid(f + forget_bias) * c + sigmoid(i) * tanh(j), h' = sigmoid(o) * tanh(c'); then
    zoneout of c' against c (zoneout_factor_cell) and of h' against h (zoneout_factor_output): in training a
    unit keeps its previous value with that probability, in eval the mix (1 - factor) * new + factor * prev.
    The output is the zoned-out h (use_zoneout_output, as the paper) or h' (older RETURNN).

    forward(x, spatial_dim=time, state=None) -> (y over (batch dims, time, out_dim), LstmState(h, c) over
    (batch dims, out_dim)): frame by frame (a Python loop over the raw time size, as rf's scan; one torch scan
    under torch.compile/export, docs/compiling.md); the state
    stops at each sequence's last valid frame and y is 0 on padding (x's padding is zeroed first, so
    NaN there reaches no gradient). forward(x, spatial_dim=None, state=) is one step (x without a time
    dim). The batch dims are x's dims other than spatial_dim and in_dim; state None means zeros."""

    def __init__(self, in_dim: Dim, out_dim: Dim, *, with_bias: bool = True, zoneout_factor_cell: float = 0.0,
                 zoneout_factor_output: float = 0.0, use_zoneout_output: bool = True, forget_bias: float = 0.0,
                 parts_order: str = "ifco", dtype="float32", device=None):
        super().__init__()
        caller = "ZoneoutLSTM()"
        for name, f in (("zoneout_factor_cell", zoneout_factor_cell), ("zoneout_factor_output", zoneout_factor_output)):
            if not isinstance(f, (int, float)) or isinstance(f, bool) or not 0.0 <= f < 1.0:
                raise ValueError(f"{caller}: {name} must be in [0, 1), got {f!r}")
        order = parts_order.replace("c", "j").replace("g", "j") if isinstance(parts_order, str) else None
        if order is None or len(order) != 4 or set(order) != set("ijfo"):
            raise ValueError(f"{caller}: parts_order must name each of i, f, o and the cell input (c, g or j) once, "
                             f"got {parts_order!r}")
        self.in_dim, self.out_dim = in_dim, out_dim
        self.gate_dim = Dim(4 * out_dim.size, name=f"4*{out_dim.name}")
        self.zoneout_factor_cell, self.zoneout_factor_output = float(zoneout_factor_cell), float(zoneout_factor_output)
        self.use_zoneout_output, self.forget_bias, self.parts_order = use_zoneout_output, forget_bias, order
        self._parts = tuple(order.index(p) for p in "ijfo")
        self.ff_weight = Parameter((self.gate_dim, in_dim), dtype, init=_init.Glorot(), device=device,
                                   in_dims=(in_dim,))
        self.rec_weight = Parameter((self.gate_dim, out_dim), dtype, init=_init.Glorot(), device=device,
                                    in_dims=(out_dim,))
        self.bias = Parameter((self.gate_dim,), dtype, init=0.0, device=device) if with_bias else None

    def default_initial_state(self, *, batch_dims: Sequence[Dim], dtype="float32", device=None) -> LstmState:
        """Zeros over (batch_dims, out_dim); the batch dims need sizes (dt.zeros)."""
        dims = tuple(batch_dims) + (self.out_dim,)
        return LstmState(zeros(dims, dtype=dtype, device=device), zeros(dims, dtype=dtype, device=device))

    def _keep_masks(self, shape: list, device) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """In training, zoneout's masks of all frames at once (cell, output; each None where its factor
        is 0): one draw for both, not one per frame or per factor. (One random op also keeps a single step
        compilable inside a scan body, e.g. rf.scan's: torch 2.13's inductor, with fallback_random, cannot
        lower a scan whose body holds two; docs/compiling.md.)"""
        if not self.training:
            return None, None
        fc, fh = self.zoneout_factor_cell, self.zoneout_factor_output
        if fc > 0.0 and fh > 0.0:
            r = torch.rand([2] + list(shape), device=device)
            return r[0] >= fc, r[1] >= fh
        return (torch.rand(shape, device=device) >= fc if fc > 0.0 else None,
                torch.rand(shape, device=device) >= fh if fh > 0.0 else None)

    def _step(self, z: torch.Tensor, h: torch.Tensor, c: torch.Tensor, rec_t: torch.Tensor,
              keep_c: Optional[torch.Tensor], keep_h: Optional[torch.Tensor]
              ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """z: the input projection of one frame (N, 4·out), rec_t: rec_weight transposed, keep_*: zoneout's
        masks of the frame (training); -> (output, h, c)."""
        z = torch.addmm(z, h, rec_t)
        parts = z.chunk(4, dim=-1)
        i, j, f, o = (parts[k] for k in self._parts)
        new_c = torch.sigmoid(f + self.forget_bias if self.forget_bias else f) * c + torch.sigmoid(i) * torch.tanh(j)
        new_h = torch.sigmoid(o) * torch.tanh(new_c)
        c = _zoneout(c, new_c, self.zoneout_factor_cell, keep_c)
        h_z = _zoneout(h, new_h, self.zoneout_factor_output, keep_h)
        return (h_z if self.use_zoneout_output else new_h), h_z, c

    def forward(self, x: Tensor, *, spatial_dim: Optional[Dim], state: Optional[LstmState] = None):
        caller = "ZoneoutLSTM()"
        check_in_dim(self, x, self.in_dim)
        if spatial_dim is not None and not any(d is spatial_dim for d in x.dims):
            raise ValueError(f"{caller}: x lacks the spatial_dim {dim_str(spatial_dim)} (x dims: {dims_str(x.dims)})")
        batch_dims, batch_shape, n_batch = batch_layout(x, spatial_dim, self.in_dim)
        out = self.out_dim.size
        if spatial_dim is not None and spatial_dim.lengths is not None:
            for d in spatial_dim.lengths.dims:
                if not any(d is e for e in batch_dims):
                    raise ValueError(f"{caller}: the lengths of {dim_str(spatial_dim)} are over {dim_str(d)}, "
                                     f"which x lacks (x dims: {dims_str(x.dims)})")
            x = x.copy_masked(0.0)  # NaN padding would reach the gradients through 0 * NaN
        order = batch_dims + ((spatial_dim,) if spatial_dim is not None else ()) + (self.in_dim,)
        # (N, T, in), or (N, in) for one step (a scan body's call: no time axis to add and select again)
        raw = _shaped(x.raw_aligned(order), [n_batch, self.in_dim.size] if spatial_dim is None else
                      [n_batch, -1, self.in_dim.size])
        z = F.linear(raw, self.ff_weight.raw, self.bias.raw if self.bias is not None else None)  # (N, [T,] 4·out)
        if state is None:
            h, c = z.new_zeros(n_batch, out), z.new_zeros(n_batch, out)  # (two: a traced scan's carries may not alias)
        else:
            h, c = (self._state_raw(s, name, batch_dims, n_batch, caller) for s, name in zip(state, ("h", "c")))
        if spatial_dim is None:
            y, h, c = self._step(z, h, c, self.rec_weight.raw.t(), *self._keep_masks([n_batch, out], z.device))
            dims = batch_dims + (self.out_dim,)
            return (Tensor(_shaped(y, batch_shape + [out]), dims, feature_dim=self.out_dim),
                    self._state(h, c, batch_dims, batch_shape))
        n_time = z.shape[1]
        valid = None
        if spatial_dim.lengths is not None:
            order = batch_dims + (spatial_dim,)
            if _tracing.tracing():  # the mask in the graph, at the raw's padded size (not the host max)
                valid = _tracing.mask_raw(spatial_dim, order, [*batch_shape, n_time], raw.device)
            else:
                valid = spatial_dim.get_mask(dims_order=order, device=raw.device).raw_aligned(order)
            valid = valid.expand(*batch_shape, n_time).reshape(n_batch, n_time)[..., None]
        rec_t = self.rec_weight.raw.t()
        keep_c, keep_h = self._keep_masks([n_batch, n_time, out], z.device)
        if n_time != 0 and torch.compiler.is_compiling():  # torch.compile, torch.export
            y, h, c = self._scan(z, h, c, rec_t, valid, keep_c, keep_h)
        else:
            if isinstance(n_time, torch.SymInt):  # plain make_fx, symbolic: a loop would fix the traced length
                raise RuntimeError(f"{caller}: make_fx(tracing_mode='symbolic') cannot trace the frame loop over a "
                                   f"symbolic time size; torch.compile and torch.export trace it as one torch scan "
                                   f"(any length), make_fx with tracing_mode='fake' unrolls it for the traced length")
            ys = []
            for t in range(n_time):
                y, h_new, c_new = self._step(z[:, t], h, c, rec_t, keep_c[:, t] if keep_c is not None else None,
                                             keep_h[:, t] if keep_h is not None else None)
                if valid is not None:  # beyond a sequence's length: the state stays, the output is 0
                    keep = valid[:, t]
                    h, c, y = torch.where(keep, h_new, h), torch.where(keep, c_new, c), torch.where(keep, y, 0.0)
                else:
                    h, c = h_new, c_new
                ys.append(y)
            y = torch.stack(ys, dim=1) if ys else z.new_zeros(n_batch, 0, out)
        dims = batch_dims + (spatial_dim, self.out_dim)
        return (Tensor(y.reshape(*batch_shape, n_time, out), dims, feature_dim=self.out_dim),
                self._state(h, c, batch_dims, batch_shape))

    def _scan(self, z: torch.Tensor, h: torch.Tensor, c: torch.Tensor, rec_t: torch.Tensor,
              valid: Optional[torch.Tensor], keep_c: Optional[torch.Tensor], keep_h: Optional[torch.Tensor]
              ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Under torch.compile and torch.export: the frame loop as one torch scan over the raw time axis
        (its size stays symbolic: one graph for every padded length, where a Python loop is unrolled per
        length). Plain make_fx keeps the loop: torch's scan does not trace there with a module's
        parameters (torch 2.13: "Mixing fake modes"). (y, h, c)."""
        def step(carry, z_t, v, kc, kh):
            h, c = carry
            y, h_new, c_new = self._step(z_t, h, c, rec_t, kc, kh)
            if v is None:
                return (h_new, c_new), y
            return (torch.where(v, h_new, h), torch.where(v, c_new, c)), torch.where(v, y, 0.0)

        (h, c), y = _in_graph.scan_frames(step, (h, c), [z, valid, keep_c, keep_h], dim=1)
        return y, h, c

    def _state(self, h: torch.Tensor, c: torch.Tensor, batch_dims: tuple, batch_shape: list) -> LstmState:
        dims = batch_dims + (self.out_dim,)
        shape = batch_shape + [self.out_dim.size]
        return LstmState(Tensor(_shaped(h, shape), dims, feature_dim=self.out_dim),
                         Tensor(_shaped(c, shape), dims, feature_dim=self.out_dim))

    def _state_raw(self, s: Tensor, name: str, batch_dims: tuple, n_batch: int, caller: str) -> torch.Tensor:
        want = batch_dims + (self.out_dim,)
        if not isinstance(s, Tensor) or len(s.dims) != len(want) or not all(any(d is e for e in s.dims) for d in want):
            got = dims_str(s.dims) if isinstance(s, Tensor) else type(s).__name__
            raise ValueError(f"{caller}: state.{name} must have dims ({dims_str(want)}), got ({got})")
        return _shaped(s.raw_aligned(want), [n_batch, self.out_dim.size])

    def extra_repr(self) -> str:
        return (f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}, "
                f"zoneout_factor_cell={self.zoneout_factor_cell}, zoneout_factor_output={self.zoneout_factor_output}")
