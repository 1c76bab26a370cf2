// The native Dim type: identity of one axis (static, size-from-data, or dynamic with host lengths).
#pragma once
#include "core/common.h"

namespace dimtorch {

/// How a derived dim (dim math) was made from its operands; kNone for a dim made by the user.
enum class DimOp : int { kNone, kAdd, kSub, kMul, kFloorDiv, kCeilDiv, kConcat };

struct DimObject {
  PyObject_HEAD
  PyObject* name;        // str, or NULL when unnamed
  Py_ssize_t size;       // static size; -1 when not static
  PyObject* dyn_size;    // lengths: a dimtorch Tensor of ints over batch dims, on the host; or NULL
  Py_ssize_t max_size;   // host max of the lengths; -1 until known
  Py_ssize_t min_size;   // host min of the lengths; -1 until known (0 means some sequence is empty)
  Py_ssize_t total_size; // host sum of the lengths (valid frames of a batch); -1 until known
  struct MaskCache* masks;  // device lengths and masks (mask.cpp); made lazily
  PyObject* cache;       // dict: index raws made from the lengths (the fast paths, fast_path_util.h); made lazily
  struct DerivedCache* derived;  // dims made from this one by dim math or merging (dim_math.cpp)
  /* Dim math: the op, operands and constant that define this dim. The operands are not owned, so
     that an operand and the derived dims cached on it form no reference cycle: the operand's
     cache owns its derived dims and, when it dies, detaches the ones still alive (derive_op
     becomes kNone; their lengths were computed when they were made). */
  DimOp derive_op;
  DimObject* derive_a;   // borrowed: alive while this dim is in its cache
  PyObject* derive_b;    // weak reference to the second Dim operand (A + B), or NULL
  Py_ssize_t derive_k;
  PyObject* weakreflist;
  /* The dim-math cache as torch.compile traces it (dimtorch.ops.dim.derive): a dict set on a Dim made
     in a graph; NULL for other Dims, whose Python view of the cache is a snapshot of `derived`. */
  PyObject* pycache;
  /* False only for a Dim made by object.__new__(Dim) (torch.compile replays a Dim made in a graph
     that way) until its fields are set through the setters, each once. */
  bool sealed;
  /* Made while make_fx or non-strict torch.export trace from a symbolic size (Dim(SymInt)), or derived
     by dim math from such a dim: its size lives in the trace's table (dimtorch._core.sizes), never
     here; `size` stays -1. (In the padding after `sealed`: the struct does not grow.) */
  bool traced_size;
  /* Error messages tell apart different Dims of one name by this number (message_dims.cpp);
     0 until a message first needs it. */
  Py_ssize_t message_id;
  /* What binding lengths per batch and RETURNN's attributes need (dim_binding.h), made on first
     use; NULL for the dims of the hot path. */
  struct DimExtra* extra;
};

extern PyTypeObject DimType;
inline bool is_dim(PyObject* o) { return Py_IS_TYPE(o, &DimType); }
inline DimObject* as_dim(PyObject* o) { return reinterpret_cast<DimObject*>(o); }
/// Static dims have a size known without data; their raw axes are checked at Tensor construction.
inline bool dim_is_static(PyObject* d) { return as_dim(d)->size >= 0; }

/// Host max of a dynamic dim's lengths (computed once), or its static size; -1 when neither
/// (a size-from-data dim). -2 with a Python error set on failure.
Py_ssize_t dim_max_size(DimObject* d);
/// Lengths Tensor of a dynamic dim (derived dims compute theirs on first use); borrowed. NULL and
/// no error when the dim has none; NULL with an error set on failure.
PyObject* dim_dyn_size(DimObject* d);
/// Host min of a dynamic dim's lengths (its size if static); -1 if unknown, -2 with error set.
Py_ssize_t dim_min_size(DimObject* d);
/// Host sum of a dynamic dim's lengths (computed once); -1 without lengths, -2 with error set.
Py_ssize_t dim_total_size(DimObject* d);
/// Whether the dim has per-sequence lengths (given, or derived by dim math from dims that have).
bool dim_has_lengths(DimObject* d);
/// Whether the dim's size or lengths are being traced (make_fx, torch.export): a symbolic size, or
/// lengths whose raw is not plain; such a dim has no host size. For failure paths: it may fetch the
/// lengths of a derived dim (false, and no error, when that fails).
bool dim_is_traced(DimObject* d);
/// Short description for messages: 'time'[batch], 'feature'(80), 'batch'(?); with `#id` appended
/// when another Dim object of the same name is in the message (MessageDims).
std::string describe_dim(PyObject* dim);

/// Checks a lengths Tensor (integer, >= 0, over dims without lengths) and returns the Tensor to keep
/// (moved to the host if needed), with its host min and max; new ref, NULL with an error naming `caller`.
PyObject* dim_checked_lengths(PyObject* lengths, Py_ssize_t* min_out, Py_ssize_t* max_out,
                              const char* caller);

/// Number of live Dim objects (leak tests).
extern Py_ssize_t g_live_dims;

/// Dim math slots (+ - * //) and dimtorch.ceildiv (dim_math.cpp).
void install_dim_math_slots(PyTypeObject* type);
/// New dim for `a <op> k` (or a + b for kConcat), cached on `a`; new reference.
PyObject* dim_derive(DimObject* a, DimOp op, Py_ssize_t k, DimObject* b, const char* caller);
/// Host lengths of derived dim `d` from its operands' (int64, never below 0); new reference.
PyObject* dim_derive_lengths(DimObject* d);
/// Host min and max of derived dim `d`'s lengths from its operand's where the op is monotone
/// (everything but A + B); false when they must be read from the lengths.
bool dim_derived_min_max(DimObject* d, Py_ssize_t* lo, Py_ssize_t* hi);
/// The second operand of A + B (borrowed), or NULL when there is none or it has died.
DimObject* dim_derive_b(DimObject* d);
/// The static dim of merging the static `dims` (a tuple), `total` its size, cached on dims[0]
/// (merging the same dims again gives the same Dim); new reference.
PyObject* dim_merged(PyObject* dims, Py_ssize_t total);
/// Releases the dims cached on `d` by dim_derive and dim_merged, detaching those still alive.
void derived_cache_free(DimObject* d);
/// Caches `d`, whose derivation fields are set (by the setter: torch.compile's replay), on its
/// first operand, which then owns it as dim_derive's dims are owned. False with an error set.
bool dim_register_derived(DimObject* d);
/// {(op code, k or the other dim): derived dim} of the dims cached on `a` by dim math, and
/// {("merge", the other dims): merged dim} of its merges; new dict.
PyObject* derived_cache_snapshot(DimObject* a);
int derived_cache_traverse(DimObject* d, visitproc visit, void* arg);

}  // namespace dimtorch
