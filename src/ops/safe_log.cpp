// Fast path of safe_log (definition: python/dimtorch/ops/safe_log.py): log(clamp_min(x, eps)) as two torch
// calls and one result Tensor, for a float Tensor and eps None (the dtype's smallest positive value) or a
// positive float or int. Anything else goes to the Python definition, which owns the errors.
#include <cmath>

#include "core/args.h"
#include "core/backend.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/python_fallback.h"
#include "core/tensor.h"

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(safe_log_fallback, "safe_log")

/// The definition's default eps per float dtype (its _TINY, RETURNN frontend's values; tests/ops/test_safe_log.py
/// checks that both give the same result on every float dtype); 0 for any other dtype.
double smallest_positive(PyObject* dtype_name) {
  static const struct {
    const char* name;
    double value;
  } kTiny[] = {{"float32", 1.4013e-45}, {"float64", 4.9407e-324}, {"float16", 6e-08}, {"bfloat16", 9.1835e-41}};
  for (const auto& t : kTiny)
    if (PyUnicode_CompareWithASCIIString(dtype_name, t.name) == 0) return t.value;
  return 0.0;
}

/// safe_log(x, /, *, eps=None) -> Tensor.
PyObject* f_safe_log(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "eps"};
  PyObject* v[2];
  if (!parse_args(args, nargs, kwnames, names, 2, 1, 1, v, "dimtorch.safe_log()", 1)) {
    PyErr_Clear();
    return safe_log_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return safe_log_fallback(args, nargs, kwnames)
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw) FALLBACK();
  TensorObject* x = as_tensor(v[0]);
  PyObject* dtype = backend::raw_dtype_name(x->raw);
  if (!dtype) return nullptr;
  double tiny = smallest_positive(dtype);
  if (tiny == 0.0) FALLBACK();
  Ref eps;
  PyObject* e = v[1];
  if (!e || e == Py_None) {
    eps = Ref(PyFloat_FromDouble(tiny));
  } else if (PyFloat_CheckExact(e) && PyFloat_AS_DOUBLE(e) > 0.0 && std::isfinite(PyFloat_AS_DOUBLE(e))) {
    eps = Ref(Py_NewRef(e));
  } else if (PyLong_CheckExact(e)) {  // the definition takes float(eps): an int as its float
    double d = PyLong_AsDouble(e);
    if (d == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      FALLBACK();
    }
    if (!(d > 0.0)) FALLBACK();
    eps = Ref(PyFloat_FromDouble(d));
  } else {
    FALLBACK();
  }
#undef FALLBACK
  if (!eps) return nullptr;
  Ref clipped(backend::call2(backend::T.clamp_min, x->raw, eps.get()));
  if (!clipped) return nullptr;
  PyObject* raw = backend::call1(backend::T.unary[backend::kLog], clipped.get());
  if (!raw) return nullptr;
  return tensor_make(raw, x->dims, x->sizes, nullptr, x->feature_dim);  // (as log's: no sparse_dim)
}

#define FASTCALL(fn) DIMTORCH_OP(fn), \
                     METH_FASTCALL | METH_KEYWORDS
PyMethodDef kFunctions[] = {
    {"safe_log", FASTCALL(f_safe_log),
     "safe_log(x, /, *, eps=None)\n--\n\nlog(maximum(x, eps)), finite where x <= 0; eps defaults to the smallest "
     "positive value of x's dtype. See dimtorch.ops.safe_log.safe_log."},
    {nullptr}};
#undef FASTCALL

}  // namespace

bool export_ops_safe_log(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
