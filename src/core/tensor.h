// The native Tensor type: a raw torch.Tensor plus dims (one Dim per raw axis) and metadata.
#pragma once
#include "core/common.h"

namespace dimtorch {

struct TensorObject {
  PyObject_VAR_HEAD      // ob_size: number of dims
  PyObject* raw;         // torch.Tensor, axes in dims order
  PyObject* dims;        // tuple of Dim
  PyObject* sparse_dim;  // Dim or NULL
  PyObject* feature_dim; // Dim or NULL
  PyObject* name;        // str or NULL
  PyObject* weakreflist;
  /* The dtype name a template declares (a Tensor with dims but no raw, RETURNN's
     Tensor(name, dims=, dtype=)): checked when a raw is assigned. NULL while the Tensor has a raw. */
  PyObject* template_dtype;
  /* Raw sizes, one per dim, kept beside the raw so that ops check and propagate sizes without
     asking torch for raw.shape (a ~100 ns call) on every op. They point into inline_sizes, or to a
     heap array for a Tensor whose fields were set one by one (see kComplete). */
  Py_ssize_t* sizes;
  unsigned char flags;   // TensorFlag bits
  Py_ssize_t inline_sizes[1];
};

/// Tensor states. A Tensor made by the constructor or an op is complete at once. One allocated by
/// object.__new__(Tensor) (torch.compile's replay of an object made in a graph, pickling) is
/// complete once raw and dims are set; until then no C++ path treats it as a Tensor.
enum TensorFlag : unsigned char {
  kComplete = 1,
  /* The raw is a plain torch.Tensor or Parameter with int sizes. The fast paths take only those:
     a FakeTensor, a traced or symbolic-shaped raw (make_fx, torch.export) goes to the op's Python
     definition, which traces; and no per-dim cache ever holds such a raw. */
  kPlain = 2,
  /* dimtorch caches this Tensor and hands it out more than once (a dim's lengths, Dim.get_mask's
     result, a module's parameter view): its raw and markers refuse assignment (copy() it first). */
  kFrozen = 4,
};

extern PyTypeObject TensorType;
/// Whether o is a Tensor or an instance of a Python subclass of it (e.g. dimtorch.rf.Parameter: a
/// Tensor whose raw is a module's torch Parameter). A subclass has Tensor's layout and adds no
/// fields (`__slots__ = ()`), so every path reads it as a Tensor; the exact type is one compare,
/// other objects pay a flag test (static types such as float never walk an MRO).
inline bool is_tensor_type(PyObject* o) {
  return Py_IS_TYPE(o, &TensorType) ||
         ((Py_TYPE(o)->tp_flags & Py_TPFLAGS_HEAPTYPE) && PyType_IsSubtype(Py_TYPE(o), &TensorType));
}
inline bool is_tensor(PyObject* o) {
  return is_tensor_type(o) && (reinterpret_cast<const TensorObject*>(o)->flags & kComplete);
}
/// A complete Tensor whose raw is not plain (see kPlain).
inline bool is_traced_tensor(PyObject* o) {
  return is_tensor_type(o) &&
         (reinterpret_cast<const TensorObject*>(o)->flags & (kComplete | kPlain)) == kComplete;
}
inline TensorObject* as_tensor(PyObject* o) { return reinterpret_cast<TensorObject*>(o); }
inline Py_ssize_t tensor_ndim(const TensorObject* t) { return Py_SIZE(t); }

/// New Tensor from parts that are already consistent (no checks). Steals `raw`, borrows the rest;
/// `sizes` has len(dims) entries. NULL (and `raw` released) on failure.
PyObject* tensor_make(PyObject* raw, PyObject* dims, const Py_ssize_t* sizes, PyObject* sparse_dim,
                      PyObject* feature_dim);
/// Like tensor_make, but checks raw against dims first (the constructor's checks).
PyObject* tensor_make_checked(PyObject* raw, PyObject* dims, PyObject* sparse_dim,
                              PyObject* feature_dim, PyObject* name, const char* caller);
/// t's raw with its axes in the order of `dims` (a tuple of Dims holding all of t's dims) and size 1
/// for the others: Tensor.raw_aligned. New reference; NULL with an error naming `caller`.
PyObject* tensor_raw_aligned(TensorObject* t, PyObject* dims, const char* caller);
/// Marks `t` frozen (kFrozen): assignments to its raw_tensor and markers are refused from now on.
inline void tensor_freeze(PyObject* t) { reinterpret_cast<TensorObject*>(t)->flags |= kFrozen; }
/// A Tensor with dims and no raw (a template: RETURNN's Tensor(name, dims=, dtype=)).
inline bool is_template(PyObject* o) {
  return Py_IS_TYPE(o, &TensorType) && reinterpret_cast<const TensorObject*>(o)->dims &&
         !reinterpret_cast<const TensorObject*>(o)->raw;
}
/// "batch:3, time:5, feature:8" for messages.
std::string describe_dims(PyObject* dims, const Py_ssize_t* sizes);
/// Index of `dim` in a dims tuple, or -1.
inline int dims_index(PyObject* dims, PyObject* dim) {
  Py_ssize_t n = PyTuple_GET_SIZE(dims);
  for (Py_ssize_t i = 0; i < n; ++i)
    if (PyTuple_GET_ITEM(dims, i) == dim) return static_cast<int>(i);
  return -1;
}
/// Whether two dims tuples list the same Dims in the same order (the same tuple, or equal items).
inline bool same_dims(PyObject* a, PyObject* b) {
  if (a == b) return true;
  Py_ssize_t n = PyTuple_GET_SIZE(a);
  if (PyTuple_GET_SIZE(b) != n) return false;
  for (Py_ssize_t i = 0; i < n; ++i)
    if (PyTuple_GET_ITEM(a, i) != PyTuple_GET_ITEM(b, i)) return false;
  return true;
}
/// dims argument (Dim, or sequence of Dim) as a new tuple; NULL with error set.
PyObject* dims_arg_to_tuple(PyObject* arg, const char* caller, const char* what);

extern Py_ssize_t g_live_tensors;


}  // namespace dimtorch
