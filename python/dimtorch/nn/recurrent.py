"""LSTM: torch's fused LSTM kernel on packed sequences, lengths from the host."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .._C import Dim, Tensor
from .._shape_ops import dim_str, dims_str
from . import init as _init
from .linear import check_in_dim
from .module import Module, Parameter


class LstmState(NamedTuple):
    """Hidden and cell state, each over (batch dims..., out_dim)."""
    h: Tensor
    c: Tensor


class LSTM(Module):
    """One LSTM layer, in_dim -> out_dim, with torch.nn.LSTM's parameter layout (gates i, f, g, o):
    weight_ih (4·out, in), weight_hh (4·out, out), bias_ih and bias_hh (4·out,), the gate dim being
    `out_dim * 4`. Weights are uniform(±1/sqrt(out)) as in torch.nn.LSTM, so copying them to or from
    an nn.LSTM gives the same results.

    `lstm(x, spatial_dim=time, state=None)` -> (y, LstmState): y has the batch dims of x (all dims
    other than spatial_dim and in_dim, in x's order) then spatial_dim, out_dim; padding frames of y
    are 0; the final state is that after each sequence's last valid frame (the initial state for a
    length-0 sequence). A dynamic spatial_dim runs as a packed sequence (pack_padded_sequence with
    lengths from the host, enforce_sorted=False); no device value is read.
    """

    def __init__(self, in_dim: Dim, out_dim: Dim, *, with_bias: bool = True, dtype="float32", device=None):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        gates = out_dim * 4
        self.gate_dim = gates
        u = _init.Uniform(-out_dim.size ** -0.5, out_dim.size ** -0.5)
        self.weight_ih = Parameter((gates, in_dim), dtype, init=u, device=device)
        self.weight_hh = Parameter((gates, out_dim), dtype, init=u, device=device)
        self.with_bias = with_bias
        if with_bias:
            self.bias_ih = Parameter((gates,), dtype, init=u, device=device)
            self.bias_hh = Parameter((gates,), dtype, init=u, device=device)

    def default_initial_state(self, batch_dims, *, dtype="float32", device=None) -> LstmState:
        from .._creation import zeros
        dims = tuple(batch_dims) + (self.out_dim,)
        return LstmState(zeros(dims, dtype=dtype, device=device), zeros(dims, dtype=dtype, device=device))

    def forward(self, x: Tensor, *, spatial_dim: Dim, state: Optional[LstmState] = None):
        caller = "LSTM()"
        check_in_dim(self, x, self.in_dim)
        if not any(d is spatial_dim for d in x.dims):
            raise ValueError(f"{caller}: x lacks the spatial_dim {dim_str(spatial_dim)} (x dims: {dims_str(x.dims)})")
        batch_dims = tuple(d for d in x.dims if d is not spatial_dim and d is not self.in_dim)
        batch_shape = [x.raw.shape[x.dims.index(d)] for d in batch_dims]
        n_batch = 1
        for s in batch_shape:
            n_batch *= s
        n_time = x.raw.shape[x.dims.index(spatial_dim)]
        raw = x.raw_aligned(batch_dims + (spatial_dim, self.in_dim)).reshape(n_batch, n_time, self.in_dim.size)
        hidden = self.out_dim.size
        if state is None:
            h0 = raw.new_zeros(1, n_batch, hidden)
            c0 = h0
        else:
            h0, c0 = (self._state_raw(s, name, batch_dims, n_batch, caller) for s, name in zip(state, ("h", "c")))
        weights = [self.weight_ih.raw, self.weight_hh.raw]
        if self.with_bias:
            weights += [self.bias_ih.raw, self.bias_hh.raw]
        if spatial_dim.is_dynamic():
            lengths = spatial_dim.dyn_size
            for d in lengths.dims:
                if not any(d is e for e in batch_dims):
                    raise ValueError(f"{caller}: the lengths of {dim_str(spatial_dim)} are over {dim_str(d)}, "
                                     f"which x lacks (x dims: {dims_str(x.dims)})")
            lens = lengths.raw_aligned(batch_dims).expand(batch_shape).reshape(n_batch).to("cpu", torch.int64)
            any_empty = int(lens.min()) == 0  # host lengths: no device read
            if any_empty:
                empty = lens == 0
                # pack_padded_sequence needs length >= 1: an empty sequence runs one zeroed frame
                # (so its garbage padding reaches no gradient) and its results are replaced below.
                keep = empty.to(raw.device, non_blocking=True)
                raw = raw.masked_fill(keep.view(n_batch, 1, 1), 0)
            packed = pack_padded_sequence(raw, lens.clamp(min=1) if any_empty else lens, batch_first=True,
                                          enforce_sorted=False)
            if state is None:  # zeros: the same in any order
                hx = (h0, c0)
            else:
                hx = (h0.index_select(1, packed.sorted_indices), c0.index_select(1, packed.sorted_indices))
            out, h, c = torch._VF.lstm(packed.data, packed.batch_sizes, hx, weights, self.with_bias, 1, 0.0,
                                       self.training, False)
            h = h.index_select(1, packed.unsorted_indices)
            c = c.index_select(1, packed.unsorted_indices)
            y, _ = pad_packed_sequence(PackedSequence(out, packed.batch_sizes, packed.sorted_indices,
                                                      packed.unsorted_indices), batch_first=True, total_length=n_time)
            if any_empty:
                y = y.masked_fill(keep.view(n_batch, 1, 1), 0)
                h = torch.where(keep.view(1, n_batch, 1), h0, h)
                c = torch.where(keep.view(1, n_batch, 1), c0, c)
        else:
            y, h, c = torch._VF.lstm(raw, (h0, c0), weights, self.with_bias, 1, 0.0, self.training, False, True)
        out_dims = batch_dims + (spatial_dim, self.out_dim)
        y = Tensor(y.reshape(*batch_shape, n_time, hidden), out_dims, feature_dim=self.out_dim)
        state_dims = batch_dims + (self.out_dim,)
        h = Tensor(h.reshape(*batch_shape, hidden), state_dims, feature_dim=self.out_dim)
        c = Tensor(c.reshape(*batch_shape, hidden), state_dims, feature_dim=self.out_dim)
        return y, LstmState(h, c)

    def _state_raw(self, s: Tensor, name: str, batch_dims: tuple, n_batch: int, caller: str) -> torch.Tensor:
        want = batch_dims + (self.out_dim,)
        if not isinstance(s, Tensor) or len(s.dims) != len(want) or not all(any(d is e for e in s.dims) for d in want):
            got = dims_str(s.dims) if isinstance(s, Tensor) else type(s).__name__
            raise ValueError(f"{caller}: state.{name} must have dims ({dims_str(want)}), got ({got})")
        return s.raw_aligned(want).reshape(1, n_batch, self.out_dim.size)

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}"
