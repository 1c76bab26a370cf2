// The raw-op table: torch types and callables cached at import, and the dtype name table.
// This is the only part of the core that knows torch; everything else calls through it.
#pragma once
#include "core/common.h"

namespace dimtorch::backend {

/// Unary raw ops, by index into the table of torch callables.
enum Unary : int {
  kExp, kLog, kLog1p, kSqrt, kRsqrt, kSquare, kTanh, kSigmoid, kRelu, kGelu, kSilu, kSoftplus,
  kSin, kCos, kFloor, kCeil, kRound, kIsFinite, kLogicalNot, kAbs, kNeg, kLogSigmoid,
  kNumUnary
};
/// Python-facing names of the unary ops (dimtorch.<name>), same order as Unary.
extern const char* const kUnaryNames[kNumUnary];

struct Table {
  PyTypeObject* tensor_type = nullptr;  // torch._C.TensorBase: every torch.Tensor is one
  PyTypeObject* plain_type = nullptr;   // torch.Tensor itself
  PyTypeObject* parameter_type = nullptr;  // torch.nn.Parameter
  PyObject* dtype_type = nullptr;       // torch.dtype
  PyObject* device_type = nullptr;      // torch.device
  PyTypeObject* symint_type = nullptr;  // torch.SymInt: a symbolic size while tracing
  // Unbound TensorBase methods, called with the raw as first argument.
  PyObject* permute = nullptr;
  PyObject* view = nullptr;
  PyObject* reshape = nullptr;
  PyObject* unsqueeze = nullptr;
  PyObject* expand = nullptr;
  PyObject* to = nullptr;
  // torch functions
  PyObject* where = nullptr;
  PyObject* maximum = nullptr;
  PyObject* minimum = nullptr;
  PyObject* clamp = nullptr;
  PyObject* clamp_min = nullptr;
  PyObject* as_tensor = nullptr;
  PyObject* deepcopy = nullptr;  // copy.deepcopy (Tensor.__deepcopy__ copies the raw with it)
  PyObject* clamp_max = nullptr;
  PyObject* logical_and = nullptr;
  PyObject* logical_or = nullptr;
  PyObject* logical_xor = nullptr;
  PyObject* logaddexp = nullptr;
  PyObject* unary[kNumUnary] = {};
  // Reductions and normalizations.
  PyObject* sum = nullptr;
  PyObject* mean = nullptr;
  PyObject* amax = nullptr;
  PyObject* amin = nullptr;
  PyObject* logsumexp = nullptr;
  PyObject* any = nullptr;
  PyObject* all = nullptr;
  PyObject* argmax = nullptr;
  PyObject* argmin = nullptr;
  PyObject* softmax = nullptr;
  PyObject* log_softmax = nullptr;
  PyObject* matmul = nullptr;
  PyObject* addmm = nullptr;        // torch.addmm
  PyObject* bmm = nullptr;          // torch.bmm
  PyObject* any_autocast = nullptr; // torch._C._is_any_autocast_enabled
  PyObject* linear = nullptr;       // torch.nn.functional.linear
  PyObject* layer_norm = nullptr;   // torch.nn.functional.layer_norm
  PyObject* rms_norm = nullptr;     // torch.nn.functional.rms_norm
  PyObject* zeros = nullptr;
  PyObject* ones = nullptr;
  PyObject* full = nullptr;
  PyObject* var_mean = nullptr;
  PyObject* cat = nullptr;
  PyObject* constant_pad_nd = nullptr;
  PyObject* gather = nullptr;
  PyObject* new_zeros = nullptr;   // TensorBase.new_zeros
  PyObject* embedding = nullptr;   // torch.nn.functional.embedding
  PyObject* one_hot = nullptr;     // torch.nn.functional.one_hot
  PyObject* dropout = nullptr;     // torch.dropout (F.dropout's kernel without its Python wrapper: the same draws)
  PyObject* new_empty = nullptr;   // TensorBase.new_empty
  PyObject* bernoulli_ = nullptr;  // TensorBase.bernoulli_
  PyObject* div_ = nullptr;        // TensorBase.div_
  PyObject* lerp_ = nullptr;       // TensorBase.lerp_
  PyObject* lerp = nullptr;        // torch.lerp
  PyObject* detach = nullptr;      // TensorBase.detach
  PyObject* addcmul = nullptr;
  PyObject* batch_norm = nullptr;  // torch.nn.functional.batch_norm
  PyObject* arange = nullptr;
  PyObject* stack = nullptr;
  PyObject* topk = nullptr;              // TensorBase.topk
  PyObject* split_with_sizes = nullptr;  // TensorBase.split_with_sizes
  PyObject* index_select = nullptr;      // TensorBase.index_select
  PyObject* flatten = nullptr;           // TensorBase.flatten
  PyObject* flip = nullptr;              // TensorBase.flip
  PyObject* expand_as = nullptr;         // TensorBase.expand_as
  PyObject* select = nullptr;            // TensorBase.select
  PyObject* scatter_add_ = nullptr;      // TensorBase.scatter_add_
  PyObject* scatter_reduce_ = nullptr;   // TensorBase.scatter_reduce_
  PyObject* scatter_ = nullptr;          // TensorBase.scatter_
  PyObject* new_full = nullptr;          // TensorBase.new_full
  PyObject* vf_stft = nullptr;           // torch._C._VariableFunctions.stft (what torch.stft calls)
  PyObject* cumsum = nullptr;            // TensorBase.cumsum
  PyObject* searchsorted = nullptr;      // torch.searchsorted
  PyObject* glu = nullptr;               // torch._C._nn.glu (what F.glu calls)
  PyObject* sdpa = nullptr;              // torch._C._nn.scaled_dot_product_attention (F.scaled_dot_product_attention)
  PyObject* get_default_dtype = nullptr; // torch.get_default_dtype
  PyObject* unfold = nullptr;            // TensorBase.unfold
  PyObject* assert_async = nullptr;      // torch._assert_async (a device-side check: no wait)
  // Convolution and pooling (src/ops/conv.cpp), by number of spatial dims - 1.
  PyObject* conv[3] = {};      // torch.conv1d, conv2d, conv3d (what F.conv*d are)
  PyObject* max_pool[3] = {};  // torch.max_pool1d, 2d, 3d (F.max_pool*d without return_indices)
  PyObject* avg_pool[3] = {};  // F.avg_pool1d, 2d, 3d
  PyObject* thnn_conv2d = nullptr;  // torch._C._nn.thnn_conv2d: im2col + matmul (one input channel on the CPU)
  PyObject* float32 = nullptr;     // torch.float32
  PyObject* int64 = nullptr;       // torch.int64
  PyObject* channels_last = nullptr;  // torch.channels_last (a memory format)
  PyObject* zero = nullptr;         // the int 0
  PyObject* float_inf = nullptr;    // float('inf')
  PyObject* float_neg_inf = nullptr;
  // Interned attribute names.
  PyObject* s_shape = nullptr;
  PyObject* s_dtype = nullptr;
  PyObject* s_device = nullptr;
  PyObject* s_requires_grad = nullptr;
  PyObject* s_mT = nullptr;
  PyObject* s_is_cpu = nullptr;
};
extern Table T;

/// Fills the table from the imported torch module. False with a Python error set on failure.
bool init();

inline bool is_raw(PyObject* o) { return PyObject_TypeCheck(o, T.tensor_type); }
/// A torch.Tensor or Parameter itself, not a subclass (FakeTensor, FunctionalTensor, DTensor, ...).
inline bool is_plain_raw(PyObject* o) {
  return Py_TYPE(o) == T.plain_type || Py_TYPE(o) == T.parameter_type;
}
/// Whether o is a torch.SymInt (a symbolic size of make_fx/torch.export). Not an int subclass.
inline bool is_symint(PyObject* o) { return PyObject_TypeCheck(o, T.symint_type); }
/// Whether o is a torch.device.
inline bool is_device(PyObject* o) {
  return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(T.device_type));
}
/// torch.device("cpu"), made once; borrowed. NULL with error set on failure.
PyObject* cpu_device();

/// Interned dtype name ("float32", ...) of a torch.dtype; borrowed. NULL with error if unknown.
PyObject* dtype_name(PyObject* torch_dtype);
/// dtype name of a raw tensor; borrowed interned str, NULL with error set.
PyObject* raw_dtype_name(PyObject* raw);
/// torch.dtype for a dtype name or a torch.dtype; borrowed. NULL with error if unknown.
PyObject* dtype_from(PyObject* name_or_dtype, const char* caller);
/// Whether a dtype name is an integer type (int*, uint*).
bool is_integer_dtype_name(PyObject* name);
bool is_floating_dtype_name(PyObject* name);

/// raw.permute(a0, a1, ...) with the axes as separate int objects: torch parses these ~0.5 us
/// faster than one tuple. New reference.
PyObject* permute(PyObject* raw, PyObject* const* axes, int n);
/// raw permuted to `order`; the raw itself (new reference) when `order` is the identity.
PyObject* permute_order(PyObject* raw, const int* order, int n);

/// If torch.jit.trace is tracing, replaces the pending error by one that says it is not supported and
/// names the alternatives; true then. For error paths only (a jit-traced shape is not an int).
bool explain_jit_trace(const char* caller);

/// Re-raises the error a torch call set with "caller: " before its message (torch's messages name
/// no dimtorch call), keeping its type; errors that already name one, or of other types, stay as
/// they are. Returns nullptr, for `return name_error(caller);`.
PyObject* name_error(const char* caller);

/// raw.<method>(arg) through a cached unbound method.
inline PyObject* call1(PyObject* fn, PyObject* a0) {
  PyObject* args[1] = {a0};
  return PyObject_Vectorcall(fn, args, 1, nullptr);
}
inline PyObject* call2(PyObject* fn, PyObject* a0, PyObject* a1) {
  PyObject* args[2] = {a0, a1};
  return PyObject_Vectorcall(fn, args, 2, nullptr);
}
inline PyObject* call3(PyObject* fn, PyObject* a0, PyObject* a1, PyObject* a2) {
  PyObject* args[3] = {a0, a1, a2};
  return PyObject_Vectorcall(fn, args, 3, nullptr);
}

}  // namespace dimtorch::backend
