// Device lengths and sequence masks of dynamic dims, cached on the dim per device and layout.
#pragma once
#include "core/common.h"
#include "core/dim.h"

namespace dimtorch {

enum class MaskKind : int { kMask = 0, kCount = 1, kLengths = 2 };

/// Cached device raw of dynamic dim `d`, laid out for a tensor of `ndim` axes in which the
/// lengths' dims sit at axes pos[0..k) (k = number of lengths dims, in the lengths' order).
/// kMask: bool, true on valid frames, with `d` itself at axis pos[k] of raw size `size`.
/// kCount: the lengths clamped to >= 1, as float32 (the divisor of a masked mean). kLengths: the lengths.
/// Size 1 on every other axis. Made once per (kind, layout, size, device); new reference.
PyObject* dim_cached_raw(DimObject* d, MaskKind kind, const signed char* pos, int ndim,
                         Py_ssize_t size, PyObject* device);

/// Dim.get_mask's Tensor: the kMask raw of this layout over `order` (a tuple of ndim dims, raw
/// sizes `sizes`), the same Tensor object while it lives (weakly cached beside the raw), frozen.
PyObject* dim_cached_mask_tensor(DimObject* d, const signed char* pos, int ndim, Py_ssize_t size,
                                 PyObject* device, PyObject* order, const Py_ssize_t* sizes);

/// Axes in `dims` of d's lengths dims (pos[0..k)), and of d itself at pos[k] when `with_self`.
/// False with a ValueError naming `caller` when `dims` lacks one of them.
bool lengths_positions(DimObject* d, PyObject* dims, bool with_self, signed char* pos, int* k,
                       const char* caller);

/// Releases the dim's cached device raws (dealloc and GC clear).
void mask_cache_free(DimObject* d);

/// dimtorch._C._dim_cached_raw (used by dimtorch.ops.mask).

}  // namespace dimtorch

namespace dimtorch {
struct TensorObject;

/// Whether dim i of x is masked when reducing over the dims marked in `reduced` (x's axes): a dim
/// with lengths that is reduced itself or whose lengths vary along a reduced dim.
bool masked_by_reduction(TensorObject* x, int i, const bool* reduced);

/// Combined bool mask (AND over x's dims at `axes`) laid out for x's raw; new reference.
PyObject* mask_for(TensorObject* x, const int* axes, int n, PyObject* device, const char* caller);

/// x's raw with the padding of x's dims at `axes` replaced by `fill`. When `mask_out` is given,
/// it receives the combined mask (new reference). New reference.
PyObject* masked_raw(TensorObject* x, const int* axes, int n, PyObject* fill, PyObject** mask_out,
                     const char* caller);

/// Tensor.copy_masked(value, dims=None).
PyObject* tensor_copy_masked(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                             PyObject* kwnames);

}  // namespace dimtorch
