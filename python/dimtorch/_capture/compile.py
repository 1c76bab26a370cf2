"""Puts dimtorch's Python definitions where the core and torch.compile look for them.

Three places, one set of definitions (the op table, dimtorch.ops.tensor, dimtorch.ops.dim):
- the core's registry (_C._set_definitions): the C++ fast paths call a definition for every case
  they do not take, and for every call on a traced tensor (make_fx, torch.export, FakeTensor);
- the type dicts of Tensor and Dim: operators as Python functions, derived properties as
  _C._Property descriptors given their Python definition. The C slots stay the eager fast paths;
  Python-level lookups, and so Dynamo, see the definitions;
- Dynamo's polyfills (torch.compiler.substitute_in_graph): each C function and method is traced as
  its definition. Registered when torch._dynamo is first imported, so that `import dimtorch` does
  not pay for importing Dynamo.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

import torch

from .. import _C, _pickle
from ..ops import (
    concat as _concat, dim as _dim, dropout as _dropout, loop as _loop, mask as _mask, packing as _packing, pool_pairs as _pool_pairs, rf_dim as _rf_dim, rf_tensor as _rf_tensor,
    signal as _signal, slicing as _slicing, tensor as _tensor,
)
from .._core import data_dependent as _data_dependent, in_graph as _in_graph, sizes as _sizes, tracing as _tracing
from .._C import Dim, Tensor
from .._op_table import OPS


def _audio_mel():
    from ..audio import mel  # noqa: PLC0415  (dimtorch.audio imports the ops: imported when first needed)
    return mel


def _core_definitions() -> dict:
    table = {name: op.definition for name, op in OPS.items()}
    table.update({f"Tensor.{name}": fn for name, fn in _tensor.METHODS.items()})
    table.update({f"Tensor.{name}": fn for name, fn in _tensor.OPERATORS.items()})
    table.update({f"Dim.{name}": fn for name, fn in _dim.METHODS.items()})
    table.update({
        "Tensor.__init__": _tensor.__init__,
        "Tensor.__reduce__": _pickle.reduce_tensor,
        "Dim.__init__": _dim.__init__,
        "Dim._rf_new": _rf_dim._rf_new,
        "Tensor._assign_raw_fallback": _rf_dim.assign_raw_fallback,
        "Dim._mul_dims": _rf_dim._mul_dims,
        "Dim.__reduce__": _pickle.reduce_dim,
        "Dim.get_mask": _mask.get_mask,
        "Dim.get_size_tensor": _mask.get_size_tensor,
        # Dim(SymInt) while make_fx/export trace: its size is the trace's (dimtorch._core.sizes)
        "Dim._traced_size": _sizes.traced_size,
        "Dim._set_traced_size": _sizes.set_traced_size,
        "Dim._padded_size": _sizes.outer_bound,
        # a traced dim's mask and lengths, built in the graph (the core's cache holds no traced raw)
        "_dim_cached_raw": _in_graph.dim_cached_raw,
        # index builders the fast paths cache per dim
        "_reverse_index": _slicing._reverse_index,
        "_valid_index": _packing._valid_index,
        "_valid_index_in": _packing._valid_index_in,
        "_gather_index": _concat._gather_index,
        "_stft_window": _signal._window,  # (made once per configuration: stft's fast path caches it)
        "_pair_max": _pool_pairs.pair_max,  # pool's pairs side by side along the last axis
        "_mel_filterbank": _audio_mel().mel_filterbank,  # (dt.audio.mel_filterbank's fast path: no op-table row)
        "_mel_filterbank_matrix": _audio_mel().mel_filterbank_matrix,  # (the matrix that fast path caches)
        # while_loop's fast path hands these cases to the definition's own code: a cond that gives no
        # Python bool, a structure it does not check itself
        "_loop_truth": _loop._truth,
        "_while_loop_check": _loop._check_same_structure,
        "to_host": _data_dependent.to_host,
        "_rf_dropout": _dropout.train_flag_dropout,  # dimtorch.rf.dropout
        "_rf_concat_features": _concat.rf_concat_features,  # dimtorch.rf.concat_features
    })
    return table


def _property_get(self, obj, objtype=None):
    """_C._Property.__get__ as Dynamo traces it: the property's Python definition (in eager the
    type's C slot, the C getter, runs instead)."""
    if obj is None:
        return self
    return self.definition(obj)


def _property_set(self, obj, value):
    """_C._Property.__set__ as Dynamo traces it: the property's Python definition of assignment."""
    if self.set_definition is None:
        raise AttributeError(f"dimtorch: attribute {type(obj).__name__}.{self.definition.__name__} is read-only")
    self.set_definition(obj, value)


def _install_type_dicts() -> None:
    _C._set_type_attr(_C._Property, "__get__", _property_get)
    _C._set_type_attr(_C._Property, "__set__", _property_set)
    for cls, module in ((Tensor, _tensor), (Dim, _dim)):
        for name, definition in module.PROPERTIES.items():
            cls.__dict__[name].definition = definition
        for name, fn in module.OPERATORS.items():
            _C._set_type_attr(cls, name, fn)
    Tensor.__dict__["raw_tensor"].set_definition = _tensor.set_raw_tensor
    # What is Python only (RETURNN's API, copy_template): into the type dicts as it is.
    for cls, attrs in ((Tensor, _tensor.PYTHON_METHODS), (Tensor, _rf_tensor.METHODS), (Tensor, _rf_tensor.PROPERTIES),
                       (Dim, _rf_dim.METHODS), (Dim, _rf_dim.PROPERTIES)):
        for name, attr in attrs.items():
            _C._set_type_attr(cls, name, attr)


_polyfills_installed = False


def _install_polyfills() -> None:
    """Registers every C function and method of dimtorch with Dynamo as its definition."""
    global _polyfills_installed
    if _polyfills_installed:
        return
    _polyfills_installed = True
    from torch.compiler import substitute_in_graph  # noqa: PLC0415

    def substitute(original, definition):
        substitute_in_graph(original, skip_signature_check=True)(definition)

    substitute(_tracing.dynamo_tracing, lambda: True)
    for op in OPS.values():
        if op.fast_path is not None:
            substitute(op.fast_path, op.definition)
    substitute(_C._merged_dim, _dim.merged_dim)
    substitute(_C._dim_cached_raw, _in_graph.dim_cached_raw)
    substitute(_C._rf_dropout, _dropout.train_flag_dropout)
    substitute(_C._rf_concat_features, _concat.rf_concat_features)
    substitute(_C._mel_filterbank, _audio_mel().mel_filterbank)
    substitute(Tensor.__init__, _tensor.__init__)
    substitute(Dim.__init__, _dim.__init__)
    for name, fn in _tensor.METHODS.items():
        substitute(Tensor.__dict__[name], fn)
    for name, fn in _dim.METHODS.items():
        substitute(Dim.__dict__[name], fn)
    substitute(Dim.__dict__["get_mask"], _mask.get_mask)
    substitute(Dim.__dict__["get_size_tensor"], _mask.get_size_tensor)


class _AfterDynamoImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs _install_polyfills once torch._dynamo has been imported (by torch.compile, say)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:
            return None
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _install_polyfills()


def install() -> None:
    _C._set_definitions(_core_definitions())
    _install_type_dicts()
    if "torch._dynamo" in sys.modules:
        _install_polyfills()
    else:
        sys.meta_path.insert(0, _AfterDynamoImport())
