"""How the benchmark reaches each framework: dimtorch, and RETURNN frontend with its PyTorch backend."""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Optional

import dimtorch as dt


class DimtorchApi:
    """Makes dimtorch dims and tensors; the batch dim takes its size from data, as in the design doc."""
    name = "dimtorch"

    @staticmethod
    def batch_dim(size: int):
        return dt.Dim(None, name="batch")

    @staticmethod
    def dim(size_or_lengths, name: str):
        return dt.Dim(size_or_lengths, name=name)

    @staticmethod
    def tensor(raw, dims, sparse_dim=None):
        return dt.Tensor(raw, dims, sparse_dim=sparse_dim)


class ReturnnApi:
    """Makes RETURNN frontend dims and tensors (PyTorch backend selected by `setup_returnn`)."""
    name = "returnn"

    def __init__(self, rf, returnn_dim_type):
        self.rf = rf
        self.Dim = returnn_dim_type

    def batch_dim(self, size: int):
        return self.Dim(size, name="batch")

    def dim(self, size_or_lengths, name: str):
        return self.Dim(size_or_lengths, name=name)

    def tensor(self, raw, dims, sparse_dim=None):
        return self.rf.convert_to_tensor(raw, dims=list(dims), sparse_dim=sparse_dim)


@dataclass
class ReturnnSetup:
    """The outcome of setting up RETURNN: its module (None when unavailable) and a line saying what we got."""
    rf: Optional[object]
    api: Optional[ReturnnApi]
    version: str
    native_helpers: bool
    problem: str = ""
    behavior_version: Optional[int] = None

    @property
    def available(self) -> bool:
        return self.rf is not None

    def describe(self) -> str:
        if not self.available:
            return f"RETURNN frontend: n/a ({self.problem})"
        native = "on" if self.native_helpers else "OFF (the native module failed to build or load)"
        return (f"RETURNN frontend {self.version}, PyTorch backend, native helpers {native}, "
                f"behavior version {self.behavior_version}")


def setup_returnn() -> ReturnnSetup:
    """Imports RETURNN, selects its PyTorch backend, sets its newest behavior version (as a new RETURNN
    config does: among others, ops mask the padding of their inputs from version 23 on and 'same'
    padding with strides stops depending on the padded length from 24 on; without it RETURNN runs at
    its minimum version) and switches its native C++ helpers on.

    The first run compiles the helpers (cached under the temp dir); the compiler's chatter goes to stderr so
    that stdout stays a clean Markdown report.
    """
    try:
        with contextlib.redirect_stdout(sys.stderr):
            import returnn
            import returnn.frontend as rf
            from returnn.frontend import _native
            from returnn.tensor import Dim
            from returnn.util.basic import BehaviorVersion
            if not BehaviorVersion.is_set():
                BehaviorVersion.set(BehaviorVersion._latest_behavior_version)
            _native.set_enabled(True)
            rf.select_backend_torch()
    except Exception as exc:  # any failure only removes the RETURNN column
        return ReturnnSetup(None, None, "n/a", False, f"{type(exc).__name__}: {exc}")
    native_on = _native.is_set_up() and getattr(_native, "_module", None) is not None
    return ReturnnSetup(rf, ReturnnApi(rf, Dim), returnn.__version__, native_on,
                        behavior_version=BehaviorVersion.get())
