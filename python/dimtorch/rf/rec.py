"""rf.LSTM, rf.LstmState, rf.ZoneoutLSTM (RETURNN frontend's parameters: `ff_weight` (4*out, in), `rec_weight`
(4*out, out), `bias` (4*out,); gates in torch's order i, f, g, o for LSTM, `parts_order` for ZoneoutLSTM).

Called as (source, *, state, spatial_dim) -> (output, new LstmState); spatial_dim = single_step_dim (or
None) is one step (source without a time dim). LSTM runs torch's fused kernel on packed sequences
(dimtorch.nn.LSTM's code) with the weights (ff_weight, rec_weight, bias, 0); a single step is one
lstm_cell. ZoneoutLSTM is dimtorch.nn.ZoneoutLSTM (the same parameters) with the run context's train flag.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from .._C import Dim, Tensor, zeros
from .._core.args import dim_str, dims_str
from ..nn import recurrent as _nn_rec
from ..nn import zoneout_lstm as _nn_zoneout
from ._dims import single_step_dim
from . import init as _init
from .module import Module
from .parameter import Parameter
from .state import State

__all__ = ["LSTM", "LstmState", "ZoneoutLSTM"]


class LstmState(State):
    """The state of an LSTM: `h` (hidden) and `c` (cell), each over (batch dims..., out_dim)."""

    def __init__(self, *_args, h: Tensor = None, c: Tensor = None):
        super().__init__(*_args)
        if not _args:
            self.h = h
            self.c = c


def _is_single_step(spatial_dim) -> bool:
    return spatial_dim is None or spatial_dim is single_step_dim


def _as_nn_state(state, caller: str) -> Optional[_nn_rec.LstmState]:
    if state is None:
        return None
    h, c = (state.h, state.c) if isinstance(state, (State, _nn_rec.LstmState)) else state
    if h is None or c is None:
        raise ValueError(f"{caller}: the state needs h (hidden) and c (cell), got {state!r}")
    return _nn_rec.LstmState(h, c)


def _rf_state(state: _nn_rec.LstmState) -> LstmState:
    return LstmState(h=state.h, c=state.c)


class LSTM(Module, _nn_rec.LSTM):
    """LSTM(in_dim, out_dim, *, with_bias=True): one LSTM layer with RETURNN's parameters (see the module
    docstring); ff_weight and rec_weight Glorot, bias zeros."""

    def __init__(self, in_dim: Dim, out_dim: Dim, *, with_bias: bool = True):
        Module.__init__(self)
        if not isinstance(in_dim, Dim) or not isinstance(out_dim, Dim):
            raise TypeError(f"dimtorch.rf.LSTM(): in_dim and out_dim must be Dims, got {in_dim!r}, {out_dim!r}")
        self.in_dim, self.out_dim = in_dim, out_dim
        self.num_layers, self.bidirectional, self.dropout = 1, False, 0.0
        self.y_dim = out_dim
        self.layer_dim = self.direction_dim = None
        self.state_dims = ()
        self.gate_dim = 4 * out_dim
        self.with_bias = with_bias
        self.ff_weight = Parameter((self.gate_dim, in_dim))
        self.ff_weight.initial = _init.Glorot()
        self.rec_weight = Parameter((self.gate_dim, out_dim))
        self.rec_weight.initial = _init.Glorot()
        self.bias = None
        if with_bias:
            self.bias = Parameter((self.gate_dim,))
            self.bias.initial = 0.0

    def _flat_weights(self) -> list:
        params = self._parameters
        w = [params["ff_weight"], params["rec_weight"]]
        if self.with_bias:
            b = params["bias"]
            w += [b, b.new_zeros(())[None].expand(b.shape[0])]  # torch's kernel adds two biases; rf has one
        return w

    def __call__(self, source: Tensor, *, state: Optional[LstmState] = None, spatial_dim: Optional[Dim]
                 ) -> Tuple[Tensor, LstmState]:
        caller = "dimtorch.rf.LSTM()"
        if not _is_single_step(spatial_dim):
            y, new = _nn_rec.LSTM.forward(self, source, spatial_dim=spatial_dim, state=_as_nn_state(state, caller))
            return y, _rf_state(new)
        _nn_rec.check_in_dim(self, source, self.in_dim)
        batch_dims, batch_shape, n = _nn_rec.batch_layout(source, None, self.in_dim)
        x = source.raw_aligned(batch_dims + (self.in_dim,)).reshape(n, self.in_dim.size)
        out = self.out_dim.size
        nn_state = _as_nn_state(state, caller)
        if nn_state is None:
            h = c = x.new_zeros(n, out)
        else:
            h, c = (self._state_raw(s, name, batch_dims, 1, n, caller).reshape(n, out)
                    for s, name in zip(nn_state, ("h", "c")))
        params = self._parameters
        b = params["bias"] if self.with_bias else None
        h, c = torch._VF.lstm_cell(x, (h, c), params["ff_weight"], params["rec_weight"], b, None)
        dims = batch_dims + (self.out_dim,)
        shape = list(batch_shape) + [out]
        h = Tensor(h.reshape(shape), dims, feature_dim=self.out_dim)
        c = Tensor(c.reshape(shape), dims, feature_dim=self.out_dim)
        return h, LstmState(h=h, c=c)

    def default_initial_state(self, *, batch_dims: Sequence[Dim]) -> LstmState:
        """Zeros over (batch_dims, out_dim) (the batch dims need sizes)."""
        dims = tuple(batch_dims) + (self.out_dim,)
        dev, dtype = self.ff_weight.raw.device, self.ff_weight.dtype
        return LstmState(h=zeros(dims, dtype=dtype, device=dev), c=zeros(dims, dtype=dtype, device=dev))


class ZoneoutLSTM(Module, _nn_zoneout.ZoneoutLSTM):
    """ZoneoutLSTM(in_dim, out_dim, *, with_bias=True, zoneout_factor_cell=0.0, zoneout_factor_output=0.0,
    use_zoneout_output=True, forget_bias=0.0, parts_order="ifco"): dimtorch.nn.ZoneoutLSTM (RETURNN's
    parameters and options), called as (source, *, state, spatial_dim); zoneout in training only (the run
    context's train flag)."""

    def __init__(self, in_dim: Dim, out_dim: Dim, *, with_bias: bool = True, zoneout_factor_cell: float = 0.0,
                 zoneout_factor_output: float = 0.0, use_zoneout_output: bool = True, forget_bias: float = 0.0,
                 parts_order: str = "ifco"):
        _nn_zoneout.ZoneoutLSTM.__init__(self, in_dim, out_dim, with_bias=with_bias,
                                         zoneout_factor_cell=zoneout_factor_cell,
                                         zoneout_factor_output=zoneout_factor_output,
                                         use_zoneout_output=use_zoneout_output, forget_bias=forget_bias,
                                         parts_order=parts_order)
        for name in ("ff_weight", "rec_weight"):
            getattr(self, name).initial = _init.Glorot()
        if with_bias:
            self.bias.initial = 0.0

    def __call__(self, source: Tensor, *, state: Optional[LstmState] = None, spatial_dim: Optional[Dim]
                 ) -> Tuple[Tensor, LstmState]:
        nn_state = _as_nn_state(state, "dimtorch.rf.ZoneoutLSTM()")
        y, new = _nn_zoneout.ZoneoutLSTM.forward(self, source, spatial_dim=None if _is_single_step(spatial_dim)
                                                 else spatial_dim, state=nn_state)
        return y, _rf_state(new)

    def default_initial_state(self, *, batch_dims: Sequence[Dim]) -> LstmState:
        """Zeros over (batch_dims, out_dim) (the batch dims need sizes)."""
        dims = tuple(batch_dims) + (self.out_dim,)
        dev, dtype = self.ff_weight.raw.device, self.ff_weight.dtype
        return LstmState(h=zeros(dims, dtype=dtype, device=dev), c=zeros(dims, dtype=dtype, device=dev))
