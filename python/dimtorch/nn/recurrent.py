"""LSTM: torch's fused LSTM kernel (stacked, bidirectional) on packed sequences, lengths from the host."""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .._core import tracing as _tracing
from .._C import Dim, Tensor, zeros
from .._core.args import dim_str, dims_str
from . import init as _init
from .linear import check_in_dim
from .module import Module, Parameter


def batch_layout(x: Tensor, spatial_dim, in_dim: Dim) -> tuple:
    """(batch dims, their sizes, their product): x's dims other than spatial_dim and in_dim, which a
    recurrent layer flattens into torch's one batch axis."""
    batch_dims = tuple(d for d in x.dims if d is not spatial_dim and d is not in_dim)
    batch_shape = [x.raw.shape[x.dims.index(d)] for d in batch_dims]
    return batch_dims, batch_shape, math.prod(batch_shape)


class LstmState(NamedTuple):
    """Hidden and cell state, each over (lstm.state_dims..., batch dims..., out_dim)."""
    h: Tensor
    c: Tensor


class LSTM(Module):
    """LSTM in_dim -> out_dim: torch.nn.LSTM's kernel and parameter layout (gates i, f, g, o).

    out_dim is the hidden size of each direction (torch's hidden_size, RETURNN's LSTM out_dim).
    Per layer k and direction, torch's parameters under torch's names less the `_l0` of the first
    layer: `weight_ih` (4·out, in), `weight_hh` (4·out, out), `bias_ih`, `bias_hh` (4·out,) for layer
    0; `weight_ih_l1`, …; the backward direction adds `_reverse` (`weight_ih_reverse`, `weight_ih_l1_reverse`).
    The gate dim is `out_dim * 4`; weights are uniform(±1/sqrt(out)) as in torch.nn.LSTM, so copying
    them to or from an nn.LSTM gives the same results.

    num_layers stacks layers (torch's `dropout` between them, training only). bidirectional runs a
    second LSTM over each sequence backwards (from its last valid frame, not from the padding) and
    concatenates the two: y's feature dim `y_dim` is then `out_dim + out_dim` (forward then backward,
    the dim dt.concat of the two directions makes), else out_dim itself. Layer k > 0 reads y_dim.

    `lstm(x, spatial_dim=time, state=None)` -> (y, LstmState): y has the batch dims of x (all dims
    other than spatial_dim and in_dim, in x's order) then spatial_dim, y_dim; padding frames of y
    are 0. The state's h and c are over `state_dims` (`layer_dim` (num_layers) when num_layers > 1,
    `direction_dim` (2: forward, backward) when bidirectional; none for one forward layer), the batch
    dims, then out_dim; the initial state (default zeros) takes the same dims in any order. The final
    state is that after each sequence's last valid frame, for every layer and direction (the backward
    direction ends at frame 0); a length-0 sequence keeps its initial state and gets y = 0.
    A dynamic spatial_dim runs as a packed sequence (pack_padded_sequence with lengths from the host,
    enforce_sorted=False); no device value is read.

    While tracing, packing is impossible (its batch sizes are data): each layer and direction runs
    torch's fused kernel on the padded frames (the backward direction on each sequence reversed in
    place), with one more input feature that is 1 on padding frames, weighted +-1e4 into the
    forget and input gates: there the gates are exactly 1 and 0, so the cell state stays that of
    the sequence's last valid frame (and no gradient passes them); y and h are taken at valid
    frames. Same results as the packed run (up to the summation order of the input projection);
    torch's inter-layer dropout is applied as F.dropout between the layers.
    """

    def __init__(self, in_dim: Dim, out_dim: Dim, *, num_layers: int = 1, bidirectional: bool = False,
                 dropout: float = 0.0, with_bias: bool = True, dtype="float32", device=None):
        super().__init__()
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"LSTM(): num_layers must be an int >= 1, got {num_layers!r}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"LSTM(): dropout must be in [0, 1], got {dropout!r}")
        self.in_dim, self.out_dim = in_dim, out_dim
        self.num_layers, self.bidirectional, self.dropout = num_layers, bool(bidirectional), float(dropout)
        self.y_dim = out_dim + out_dim if bidirectional else out_dim
        self.layer_dim = Dim(num_layers, name="lstm_layer") if num_layers > 1 else None
        self.direction_dim = Dim(2, name="lstm_direction") if bidirectional else None
        self.state_dims = tuple(d for d in (self.layer_dim, self.direction_dim) if d is not None)
        gates = out_dim * 4
        self.gate_dim = gates
        self.with_bias = with_bias
        u = _init.Uniform(-out_dim.size ** -0.5, out_dim.size ** -0.5)
        names = []
        for k in range(num_layers):
            layer_in = in_dim if k == 0 else self.y_dim
            for suffix in ("", "_reverse")[:2 if bidirectional else 1]:
                sfx = (f"_l{k}" if k else "") + suffix
                setattr(self, "weight_ih" + sfx, Parameter((gates, layer_in), dtype, init=u, device=device))
                setattr(self, "weight_hh" + sfx, Parameter((gates, out_dim), dtype, init=u, device=device))
                names += ["weight_ih" + sfx, "weight_hh" + sfx]
                if with_bias:
                    setattr(self, "bias_ih" + sfx, Parameter((gates,), dtype, init=u, device=device))
                    setattr(self, "bias_hh" + sfx, Parameter((gates,), dtype, init=u, device=device))
                    names += ["bias_ih" + sfx, "bias_hh" + sfx]
        self._weight_names = tuple(names)  # the order torch's kernel takes them in

    def default_initial_state(self, batch_dims, *, dtype="float32", device=None) -> LstmState:
        """Zeros over (state_dims, batch_dims, out_dim); the batch dims need sizes (dt.zeros)."""
        dims = self.state_dims + tuple(batch_dims) + (self.out_dim,)
        return LstmState(zeros(dims, dtype=dtype, device=device), zeros(dims, dtype=dtype, device=device))

    def forward(self, x: Tensor, *, spatial_dim: Dim, state: Optional[LstmState] = None):
        caller = "LSTM()"
        check_in_dim(self, x, self.in_dim)
        if not any(d is spatial_dim for d in x.dims):
            raise ValueError(f"{caller}: x lacks the spatial_dim {dim_str(spatial_dim)} (x dims: {dims_str(x.dims)})")
        batch_dims, batch_shape, n_batch = batch_layout(x, spatial_dim, self.in_dim)
        n_time = x.raw.shape[x.dims.index(spatial_dim)]
        raw = x.raw_aligned(batch_dims + (spatial_dim, self.in_dim)).reshape(n_batch, n_time, self.in_dim.size)
        hidden = self.out_dim.size
        n_states = self.num_layers * (2 if self.bidirectional else 1)  # torch's state rows: layer-major
        if state is None:
            h0 = raw.new_zeros(n_states, n_batch, hidden)
            c0 = h0
        else:
            h0, c0 = (self._state_raw(s, name, batch_dims, n_states, n_batch, caller)
                      for s, name in zip(state, ("h", "c")))
        weights = self._flat_weights()
        args = (self.with_bias, self.num_layers, self.dropout, self.training, self.bidirectional)
        if spatial_dim.is_dynamic():
            lengths = spatial_dim.lengths
            for d in lengths.dims:
                if not any(d is e for e in batch_dims):
                    raise ValueError(f"{caller}: the lengths of {dim_str(spatial_dim)} are over {dim_str(d)}, "
                                     f"which x lacks (x dims: {dims_str(x.dims)})")
        if spatial_dim.is_dynamic() and _tracing.tracing():
            lens = _tracing.lengths_raw(spatial_dim, batch_dims, raw.device).expand(batch_shape).reshape(n_batch)
            y, h, c = self._run_in_graph(raw, lens.to(torch.int64), h0, c0, weights)
        elif spatial_dim.is_dynamic():
            lens = lengths.raw_aligned(batch_dims).expand(batch_shape).reshape(n_batch).to("cpu", torch.int64)
            any_empty = n_batch > 0 and int(lens.min()) == 0  # host lengths: no device read
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
            out, h, c = torch._VF.lstm(packed.data, packed.batch_sizes, hx, weights, *args)
            h = h.index_select(1, packed.unsorted_indices)
            c = c.index_select(1, packed.unsorted_indices)
            y, _ = pad_packed_sequence(PackedSequence(out, packed.batch_sizes, packed.sorted_indices,
                                                      packed.unsorted_indices), batch_first=True, total_length=n_time)
            if any_empty:
                y = y.masked_fill(keep.view(n_batch, 1, 1), 0)
                h = torch.where(keep.view(1, n_batch, 1), h0, h)
                c = torch.where(keep.view(1, n_batch, 1), c0, c)
        else:
            y, h, c = torch._VF.lstm(raw, (h0, c0), weights, *args, True)
        out_dims = batch_dims + (spatial_dim, self.y_dim)
        y = Tensor(y.reshape(*batch_shape, n_time, self.y_dim.size), out_dims, feature_dim=self.y_dim)
        state_shape = [d.size for d in self.state_dims] + batch_shape + [hidden]
        state_dims = self.state_dims + batch_dims + (self.out_dim,)
        h = Tensor(h.reshape(state_shape), state_dims, feature_dim=self.out_dim)
        c = Tensor(c.reshape(state_shape), state_dims, feature_dim=self.out_dim)
        return y, LstmState(h, c)

    def _flat_weights(self) -> list:
        """The weights in the order torch's LSTM kernel takes them (per layer and direction: w_ih, w_hh, and
        with biases b_ih, b_hh): the torch Parameters themselves, no named views made per call. (dimtorch.rf's
        LSTM, with RETURNN's parameters, gives its own.)"""
        params = self._parameters
        return [params[name] for name in self._weight_names]

    def _run_in_graph(self, raw: torch.Tensor, lens: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor,
                      weights: list):
        """While tracing: (y, h, c) of the stacked LSTM on raw (N, T, in) with lengths lens (N,), as the
        packed run gives them (see the class docstring)."""
        n, t = raw.shape[0], raw.shape[1]
        frames = torch.arange(t, device=raw.device)
        valid = frames < lens[:, None]  # (N, T)
        padding = (~valid).to(raw.dtype)[..., None]
        # Each sequence reversed in place (its padding stays behind it), for the backward direction.
        reverse = torch.where(valid, lens[:, None] - 1 - frames, frames)
        last = (lens - 1).clamp(min=0)[:, None, None]  # the frame of each sequence's final state
        empty = (lens == 0)[None, :, None]
        per_direction = 4 if self.with_bias else 2
        directions = 2 if self.bidirectional else 1
        inp, hs, cs = raw, [], []
        for k in range(self.num_layers):
            if k and self.training and self.dropout:
                inp = torch.nn.functional.dropout(inp, self.dropout, True)
            outs = []
            for d in range(directions):
                i = k * directions + d
                w = weights[i * per_direction:(i + 1) * per_direction]
                # The padding feature's weights: -1e4 into the input gate, +1e4 into the forget gate.
                hidden = w[1].shape[1]
                col = torch.cat([w[0].new_full((hidden, 1), -1e4), w[0].new_full((hidden, 1), 1e4),
                                 w[0].new_zeros(2 * hidden, 1)])
                w = [torch.cat([w[0], col], dim=1)] + list(w[1:])
                seq = inp if d == 0 else inp.gather(1, reverse[..., None].expand(inp.shape))
                seq = torch.cat([torch.where(valid[..., None], seq, 0), padding], dim=2)
                y, _, c = torch._VF.lstm(seq, (h0[i:i + 1], c0[i:i + 1]), w, self.with_bias, 1, 0.0, self.training,
                                         False, True)
                h = y.gather(1, last.expand(n, 1, hidden)).transpose(0, 1)  # (1, N, H)
                hs.append(torch.where(empty, h0[i:i + 1], h))
                cs.append(c)  # the padding frames kept it; an empty sequence keeps c0
                outs.append(y if d == 0 else y.gather(1, reverse[..., None].expand(y.shape)))
            inp = torch.where(valid[..., None], outs[0] if directions == 1 else torch.cat(outs, dim=2), 0)
        return inp, torch.cat(hs), torch.cat(cs)

    def _state_raw(self, s: Tensor, name: str, batch_dims: tuple, n_states: int, n_batch: int,
                   caller: str) -> torch.Tensor:
        want = self.state_dims + batch_dims + (self.out_dim,)
        if not isinstance(s, Tensor) or len(s.dims) != len(want) or not all(any(d is e for e in s.dims) for d in want):
            got = dims_str(s.dims) if isinstance(s, Tensor) else type(s).__name__
            raise ValueError(f"{caller}: state.{name} must have dims ({dims_str(want)}), got ({got})")
        return s.raw_aligned(want).reshape(n_states, n_batch, self.out_dim.size)

    def extra_repr(self) -> str:
        extra = f", num_layers={self.num_layers}" if self.num_layers > 1 else ""
        extra += ", bidirectional=True" if self.bidirectional else ""
        extra += f", dropout={self.dropout}" if self.dropout else ""
        return f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}{extra}"
