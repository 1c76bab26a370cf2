// Reductions over named dims, and helpers that other ops over one dim share.
#pragma once
#include "core/common.h"
#include "core/tensor.h"

namespace dimtorch {

/// Axes of x named by `axis` (a Dim or sequence of Dims); false with an error naming `caller`
/// when one is missing or given twice.
bool axes_arg(TensorObject* x, PyObject* axis, int* axes, int* n_axes, const char* caller);
/// Tuple of x's dims without those marked in `removed`; their raw sizes go to sizes_out.
PyObject* dims_without(TensorObject* x, const bool* removed, Py_ssize_t* sizes_out);
/// Neutral fill for max (low=true: -inf / dtype min) or min (+inf / dtype max) of raw's dtype; a
/// TypeError naming `caller` for a dtype without one.
PyObject* extreme_fill(PyObject* raw, bool low, const char* caller);

/// moments(x, axis, use_mask=True) from vectorcall args; with `count_out`, also the number of frames
/// each statistic is over (a Python float, or a raw over the statistics' dims) and the centered x
/// (a Tensor, zeroed padding minus the mean); both stay NULL when nothing was masked.
PyObject* moments_impl(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                       PyObject** count_out, PyObject** centered_out, const char* caller);

}  // namespace dimtorch
