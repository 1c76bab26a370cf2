"""rf.piecewise_linear: RETURNN frontend's PiecewiseLinear module (a schedule or any scalar function given
by points), elementwise on a dimtorch Tensor."""
from __future__ import annotations

from typing import Dict, Union

import torch

from dimtorch import Dim, Tensor

from .module import Module
from .parameter import Parameter

__all__ = ["PiecewiseLinear"]


class PiecewiseLinear(Module):
    """f(x) through the points {x_i: y_i}: linear between neighbouring x_i, y of the first point below the
    first x_i and of the last point above the last x_i. A y may be a Tensor (all of them then over the same
    dims): the result is over x's dims then theirs. No parameters (the points are fixed)."""

    def __init__(self, points: Dict[Union[int, float], Union[float, Tensor]]):
        super().__init__()
        if not points:
            raise ValueError("dimtorch.rf.PiecewiseLinear(): points is empty")
        items = sorted(points.items())
        self.points = dict(items)
        self._xs = [float(k) for k, _ in items]
        ys = [v for _, v in items]
        tensors = [v for v in ys if isinstance(v, Tensor)]
        self._value_dims = tuple(tensors[0].dims) if tensors else ()
        for v in tensors:
            if set(map(id, v.dims)) != set(map(id, self._value_dims)):
                raise ValueError(f"dimtorch.rf.PiecewiseLinear(): the Tensor values must share their dims, got "
                                 f"{self._value_dims} and {v.dims}")
        self._ys = ys
        # RETURNN's state names (auxiliary parameters _keys and _values over points_dim), so that
        # checkpoints and parameter names carry over; the call reads the points from them
        self.points_dim = Dim(len(items), name="pcw_schd_pieces")
        self._keys = Parameter(Tensor(torch.tensor(self._xs, dtype=torch.get_default_dtype()), (self.points_dim,)),
                               auxiliary=True)
        self._values = Parameter(Tensor(self._ys_raw(torch.get_default_dtype(), None),
                                        (self.points_dim,) + self._value_dims), auxiliary=True)

    def _ys_raw(self, dtype: torch.dtype, device) -> torch.Tensor:
        shape = [d.size if d.size is not None else d.get_dim_value() for d in self._value_dims]
        rows = [y.raw_aligned(self._value_dims).to(dtype=dtype, device=device).expand(shape) if isinstance(y, Tensor)
                else torch.full(shape, float(y), dtype=dtype, device=device) for y in self._ys]
        return torch.stack(rows)  # [points, *value dims]

    def __call__(self, x: Tensor) -> Tensor:
        raw = x.raw
        dtype = raw.dtype if raw.is_floating_point() else torch.get_default_dtype()
        raw = raw.to(dtype)
        xs = self._keys.raw.to(dtype=dtype, device=raw.device)
        ys = self._values.raw.to(dtype=dtype, device=raw.device)
        n = len(self._xs)
        if n == 1:
            out = ys[0].expand(tuple(raw.shape) + tuple(ys.shape[1:]))
        else:
            # the segment [x_i0, x_i1] of each value; outside the points the weight clamps to the end point
            i1 = torch.searchsorted(xs, raw.contiguous(), right=True).clamp(1, n - 1)
            i0 = i1 - 1
            x0, x1 = xs[i0], xs[i1]
            w = ((raw - x0) / (x1 - x0)).clamp(0.0, 1.0)
            w = w.reshape(tuple(w.shape) + (1,) * len(self._value_dims))
            y0, y1 = ys[i0], ys[i1]
            out = y0 + w * (y1 - y0)
        return Tensor(out, tuple(x.dims) + self._value_dims)
