// The raw-op table: fills the cached torch callables and the dtype table at import.
#include "core/backend.h"
#include "core/keyword_hints.h"

#include <cstring>

namespace dimtorch {

std::string to_std_string(PyObject* o) {
  if (!o) return "<null>";
  PyObject* s = PyObject_Str(o);
  if (!s) {
    PyErr_Clear();
    return "<unprintable>";
  }
  const char* c = PyUnicode_AsUTF8(s);
  std::string r = c ? c : "<unprintable>";
  if (!c) PyErr_Clear();
  Py_DECREF(s);
  return r;
}

namespace backend {

Table T;

const char* const kUnaryNames[kNumUnary] = {
    "exp",  "log",   "log1p", "sqrt",     "rsqrt",     "square",      "tanh",
    "sigmoid", "relu", "gelu", "silu",    "softplus",  "sin",         "cos",
    "floor", "ceil", "round", "is_finite", "logical_not", "abs",      "neg",   "log_sigmoid"};

namespace {

/* dtype lookup is a linear scan over a handful of pointers: cheaper than repr(dtype), which builds a
   new string on every call (RETURNN found that on its hot path). */
constexpr int kMaxDtypes = 24;
struct DtypeEntry {
  PyObject* dtype;  // torch.dtype object (strong ref)
  PyObject* name;   // interned str
  bool is_int;
  bool is_float;
};
DtypeEntry g_dtypes[kMaxDtypes];
int g_num_dtypes = 0;

const char* const kDtypeNames[] = {
    "float16", "bfloat16", "float32", "float64", "int8",  "int16",  "int32",         "int64",
    "uint8",   "bool",     "complex64", "complex128", "uint16", "uint32", "uint64",
    "float8_e4m3fn", "float8_e5m2"};

bool get_attr(PyObject* obj, const char* name, PyObject** out) {
  *out = PyObject_GetAttrString(obj, name);
  return *out != nullptr;
}

}  // namespace

bool init() {
  Ref torch(PyImport_ImportModule("torch"));
  if (!torch) return false;
  Ref functional(PyImport_ImportModule("torch.nn.functional"));
  if (!functional) return false;
  Ref c_mod(PyObject_GetAttrString(torch.get(), "_C"));
  if (!c_mod) return false;
  PyObject* tb = PyObject_GetAttrString(c_mod.get(), "TensorBase");
  if (!tb) return false;
  if (!PyType_Check(tb)) {
    Py_DECREF(tb);
    PyErr_SetString(PyExc_ImportError, "dimtorch: torch._C.TensorBase is not a type");
    return false;
  }
  T.tensor_type = reinterpret_cast<PyTypeObject*>(tb);
  PyObject* t = torch.get();
  PyObject* F = functional.get();
  Ref parameter_mod(PyImport_ImportModule("torch.nn.parameter"));
  if (!parameter_mod) return false;
  Ref copy_mod(PyImport_ImportModule("copy"));
  if (!copy_mod || !get_attr(copy_mod.get(), "deepcopy", &T.deepcopy)) return false;
  Ref vf_mod(PyObject_GetAttrString(c_mod.get(), "_VariableFunctions"));
  if (!vf_mod || !get_attr(vf_mod.get(), "stft", &T.vf_stft)) return false;
  Ref nn_mod(PyObject_GetAttrString(c_mod.get(), "_nn"));
  if (!nn_mod || !get_attr(nn_mod.get(), "glu", &T.glu) ||
      !get_attr(nn_mod.get(), "scaled_dot_product_attention", &T.sdpa) ||
      !get_attr(t, "get_default_dtype", &T.get_default_dtype) ||
      !get_attr(c_mod.get(), "_is_any_autocast_enabled", &T.any_autocast))
    return false;
  PyObject* plain = PyObject_GetAttrString(t, "Tensor");
  PyObject* parameter = plain ? PyObject_GetAttrString(parameter_mod.get(), "Parameter") : nullptr;
  if (!parameter) return false;
  T.plain_type = reinterpret_cast<PyTypeObject*>(plain);
  PyObject* symint = PyObject_GetAttrString(t, "SymInt");
  if (!symint) return false;
  if (!PyType_Check(symint)) {
    Py_DECREF(symint);
    PyErr_SetString(PyExc_ImportError, "dimtorch: torch.SymInt is not a type");
    return false;
  }
  T.symint_type = reinterpret_cast<PyTypeObject*>(symint);
  T.parameter_type = reinterpret_cast<PyTypeObject*>(parameter);
  bool ok = get_attr(t, "dtype", &T.dtype_type) && get_attr(t, "device", &T.device_type) && get_attr(tb, "permute", &T.permute) &&
            get_attr(tb, "view", &T.view) && get_attr(tb, "reshape", &T.reshape) &&
            get_attr(tb, "unsqueeze", &T.unsqueeze) && get_attr(tb, "expand", &T.expand) &&
            get_attr(tb, "to", &T.to) && get_attr(t, "where", &T.where) &&
            get_attr(t, "maximum", &T.maximum) && get_attr(t, "minimum", &T.minimum) &&
            get_attr(t, "clamp", &T.clamp) && get_attr(t, "clamp_min", &T.clamp_min) &&
            get_attr(t, "as_tensor", &T.as_tensor) &&
            get_attr(t, "clamp_max", &T.clamp_max) && get_attr(t, "logical_and", &T.logical_and) &&
            get_attr(t, "logical_or", &T.logical_or) && get_attr(t, "logical_xor", &T.logical_xor) &&
            get_attr(t, "logaddexp", &T.logaddexp);
  ok = ok && get_attr(t, "sum", &T.sum) && get_attr(t, "mean", &T.mean) &&
       get_attr(t, "amax", &T.amax) && get_attr(t, "amin", &T.amin) &&
       get_attr(t, "logsumexp", &T.logsumexp) && get_attr(t, "any", &T.any) &&
       get_attr(t, "all", &T.all) && get_attr(t, "argmax", &T.argmax) &&
       get_attr(t, "argmin", &T.argmin) && get_attr(t, "softmax", &T.softmax) &&
       get_attr(t, "log_softmax", &T.log_softmax) && get_attr(t, "matmul", &T.matmul) &&
       get_attr(t, "addmm", &T.addmm) && get_attr(t, "bmm", &T.bmm) &&
       get_attr(F, "linear", &T.linear) && get_attr(F, "layer_norm", &T.layer_norm) &&
       get_attr(F, "rms_norm", &T.rms_norm) && get_attr(t, "zeros", &T.zeros) &&
       get_attr(t, "ones", &T.ones) && get_attr(t, "full", &T.full) &&
       get_attr(t, "var_mean", &T.var_mean) && get_attr(t, "cat", &T.cat) &&
       get_attr(t, "constant_pad_nd", &T.constant_pad_nd) && get_attr(t, "gather", &T.gather) &&
       get_attr(tb, "new_zeros", &T.new_zeros) &&
       get_attr(F, "embedding", &T.embedding) && get_attr(F, "one_hot", &T.one_hot) && get_attr(t, "dropout", &T.dropout) &&
       get_attr(tb, "new_empty", &T.new_empty) && get_attr(tb, "bernoulli_", &T.bernoulli_) &&
       get_attr(tb, "div_", &T.div_) && get_attr(tb, "lerp_", &T.lerp_) &&
       get_attr(tb, "detach", &T.detach) && get_attr(t, "addcmul", &T.addcmul) &&
       get_attr(t, "lerp", &T.lerp) && get_attr(t, "_assert_async", &T.assert_async) &&
       get_attr(tb, "cumsum", &T.cumsum) && get_attr(t, "searchsorted", &T.searchsorted) &&
       get_attr(F, "batch_norm", &T.batch_norm) && get_attr(t, "arange", &T.arange) &&
       get_attr(t, "float32", &T.float32) && get_attr(t, "int64", &T.int64) &&
       get_attr(t, "channels_last", &T.channels_last) &&
       get_attr(t, "stack", &T.stack) && get_attr(tb, "topk", &T.topk) &&
       get_attr(tb, "split_with_sizes", &T.split_with_sizes) &&
       get_attr(tb, "index_select", &T.index_select) && get_attr(tb, "flatten", &T.flatten) &&
       get_attr(tb, "flip", &T.flip) && get_attr(tb, "expand_as", &T.expand_as) && get_attr(tb, "select", &T.select) &&
       get_attr(tb, "scatter_add_", &T.scatter_add_) && get_attr(tb, "unfold", &T.unfold) &&
       get_attr(tb, "scatter_reduce_", &T.scatter_reduce_) && get_attr(tb, "scatter_", &T.scatter_) &&
       get_attr(tb, "new_full", &T.new_full);
  if (!ok) return false;
  const char* const conv_names[3] = {"conv1d", "conv2d", "conv3d"};
  const char* const max_pool_names[3] = {"max_pool1d", "max_pool2d", "max_pool3d"};
  const char* const avg_pool_names[3] = {"avg_pool1d", "avg_pool2d", "avg_pool3d"};
  for (int i = 0; i < 3; ++i)
    if (!get_attr(t, conv_names[i], &T.conv[i]) || !get_attr(t, max_pool_names[i], &T.max_pool[i]) ||
        !get_attr(F, avg_pool_names[i], &T.avg_pool[i]))
      return false;
  if (!get_attr(nn_mod.get(), "thnn_conv2d", &T.thnn_conv2d)) return false;
  T.zero = PyLong_FromLong(0);
  T.float_inf = PyFloat_FromDouble(Py_HUGE_VAL);
  T.float_neg_inf = PyFloat_FromDouble(-Py_HUGE_VAL);
  // Where torch's name differs from ours, or the op lives in torch.nn.functional.
  struct { Unary op; PyObject* mod; const char* name; } sources[] = {
      {kExp, t, "exp"},          {kLog, t, "log"},           {kLog1p, t, "log1p"},
      {kSqrt, t, "sqrt"},        {kRsqrt, t, "rsqrt"},       {kSquare, t, "square"},
      {kTanh, t, "tanh"},        {kSigmoid, t, "sigmoid"},   {kRelu, t, "relu"},
      {kGelu, F, "gelu"},        {kSilu, F, "silu"},         {kSoftplus, F, "softplus"},
      {kSin, t, "sin"},          {kCos, t, "cos"},           {kFloor, t, "floor"},
      {kCeil, t, "ceil"},        {kRound, t, "round"},       {kIsFinite, t, "isfinite"},
      {kLogicalNot, t, "logical_not"}, {kAbs, t, "abs"},     {kNeg, t, "neg"},
      {kLogSigmoid, F, "logsigmoid"}};
  for (auto& s : sources)
    if (!get_attr(s.mod, s.name, &T.unary[s.op])) return false;

  T.s_shape = PyUnicode_InternFromString("shape");
  T.s_dtype = PyUnicode_InternFromString("dtype");
  T.s_device = PyUnicode_InternFromString("device");
  T.s_requires_grad = PyUnicode_InternFromString("requires_grad");
  T.s_mT = PyUnicode_InternFromString("mT");
  T.s_is_cpu = PyUnicode_InternFromString("is_cpu");
  if (!T.s_shape || !T.s_dtype || !T.s_device || !T.s_requires_grad || !T.s_mT ||
      !T.s_is_cpu)
    return false;

  for (const char* name : kDtypeNames) {
    PyObject* dt = PyObject_GetAttrString(t, name);
    if (!dt) {  // older torch without this dtype
      PyErr_Clear();
      continue;
    }
    DtypeEntry& e = g_dtypes[g_num_dtypes++];
    e.dtype = dt;
    e.name = PyUnicode_InternFromString(name);
    if (!e.name) return false;
    e.is_int = std::strncmp(name, "int", 3) == 0 || std::strncmp(name, "uint", 4) == 0;
    e.is_float = std::strncmp(name, "float", 5) == 0 || std::strcmp(name, "bfloat16") == 0;
  }
  return true;
}

PyObject* cpu_device() {
  static PyObject* cpu = nullptr;
  if (!cpu) cpu = PyObject_CallFunction(T.device_type, "s", "cpu");
  return cpu;
}

PyObject* dtype_name(PyObject* torch_dtype) {
  for (int i = 0; i < g_num_dtypes; ++i)
    if (g_dtypes[i].dtype == torch_dtype) return g_dtypes[i].name;
  PyErr_Format(PyExc_TypeError, "dimtorch: unsupported torch dtype %R", torch_dtype);
  return nullptr;
}

PyObject* raw_dtype_name(PyObject* raw) {
  Ref d(PyObject_GetAttr(raw, T.s_dtype));
  if (!d) return nullptr;
  return dtype_name(d.get());
}

PyObject* dtype_from(PyObject* v, const char* caller) {
  if (PyUnicode_Check(v)) {
    for (int i = 0; i < g_num_dtypes; ++i) {
      int eq = PyUnicode_Compare(g_dtypes[i].name, v);
      if (eq == 0) return g_dtypes[i].dtype;
    }
    PyErr_Clear();
    std::string known;
    for (int i = 0; i < g_num_dtypes; ++i)
      known += std::string(i ? ", " : "") + PyUnicode_AsUTF8(g_dtypes[i].name);
    PyErr_Format(PyExc_ValueError, "%s: unknown dtype %R (known: %s)", caller, v, known.c_str());
    return nullptr;
  }
  for (int i = 0; i < g_num_dtypes; ++i)
    if (g_dtypes[i].dtype == v) return v;
  PyErr_Format(PyExc_TypeError, "%s: dtype must be a dtype name such as 'float32' or a torch.dtype, got %R",
               caller, v);
  return nullptr;
}

PyObject* permute(PyObject* raw, PyObject* const* axes, int n) {
  PyObject* args[kMaxDims + 1];
  args[0] = raw;
  for (int i = 0; i < n; ++i) args[i + 1] = axes[i];
  return PyObject_Vectorcall(T.permute, args, n + 1, nullptr);
}

PyObject* permute_order(PyObject* raw, const int* order, int n) {
  bool identity = true;
  for (int i = 0; i < n; ++i) identity = identity && order[i] == i;
  if (identity) return Py_NewRef(raw);
  PyObject* axes[kMaxDims];
  for (int i = 0; i < n; ++i) axes[i] = PyLong_FromLong(order[i]);  // small ints: cached
  PyObject* r = permute(raw, axes, n);
  for (int i = 0; i < n; ++i) Py_DECREF(axes[i]);
  return r;
}

bool is_integer_dtype_name(PyObject* name) {
  for (int i = 0; i < g_num_dtypes; ++i)
    if (g_dtypes[i].name == name) return g_dtypes[i].is_int;
  return false;
}

bool is_floating_dtype_name(PyObject* name) {
  for (int i = 0; i < g_num_dtypes; ++i)
    if (g_dtypes[i].name == name) return g_dtypes[i].is_float;
  return false;
}

bool explain_jit_trace(const char* caller) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  Ref jit(PyImport_ImportModule("torch._C"));
  Ref state(jit ? PyObject_CallMethod(jit.get(), "_get_tracing_state", nullptr) : nullptr);
  bool tracing = state && state.get() != Py_None;
  if (!tracing) {
    PyErr_Clear();  // an error of the check itself: keep the original one
    PyErr_Restore(type, value, tb);
    return false;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Format(PyExc_RuntimeError,
               "%s: torch.jit.trace is not supported: TorchScript cannot hold named dims, and a "
               "trace would fix one batch's sequence lengths as constants. Use torch.export.export "
               "(lengths are graph inputs there) or torch.compile instead.",
               caller);
  return true;
}

PyObject* name_error(const char* caller) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (!type) return nullptr;
  PyErr_NormalizeException(&type, &value, &tb);
  bool plain = type == PyExc_TypeError || type == PyExc_ValueError || type == PyExc_RuntimeError ||
               type == PyExc_IndexError || type == PyExc_OverflowError || type == PyExc_NotImplementedError;
  PyObject* msg = plain && value ? PyObject_Str(value) : nullptr;
  const char* text = msg ? PyUnicode_AsUTF8(msg) : nullptr;
  if (!text || std::strncmp(text, "dimtorch", 8) == 0) {
    PyErr_Clear();
    Py_XDECREF(msg);
    PyErr_Restore(type, value, tb);
    return nullptr;
  }
  std::string hint = type == PyExc_TypeError ? torch_keyword_hint_for_message(text) : "";
  PyErr_Format(type, "%s: %s%s", caller, text, hint.c_str());
  Py_DECREF(msg);
  Py_DECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return nullptr;
}

}  // namespace backend
}  // namespace dimtorch
