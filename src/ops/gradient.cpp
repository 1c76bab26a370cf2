// Fast path of stop_gradient (definition: python/dimtorch/ops/gradient.py): the raw's detach(), dims
// and markers kept. Anything else goes to the Python definition, which owns the errors.
#include "core/args.h"
#include "core/backend.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/python_fallback.h"
#include "core/tensor.h"

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(stop_gradient_fallback, "stop_gradient")

/// stop_gradient(source): source with its raw detached from the autograd graph (a view of the same
/// values; markers kept).
PyObject* f_stop_gradient(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"source"};
  PyObject* v[1];
  if (!parse_args(args, nargs, kwnames, names, 1, 1, 1, v, "dimtorch.stop_gradient()")) {
    PyErr_Clear();
    return stop_gradient_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw) return stop_gradient_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  PyObject* raw = backend::call1(backend::T.detach, x->raw);
  if (!raw) return nullptr;
  return tensor_make(raw, x->dims, x->sizes, x->sparse_dim, x->feature_dim);
}

#define FASTCALL(fn) DIMTORCH_OP(fn), \
                     METH_FASTCALL | METH_KEYWORDS
PyMethodDef kFunctions[] = {
    {"stop_gradient", FASTCALL(f_stop_gradient),
     "stop_gradient(source)\n--\n\nsource with its raw detached (no gradient flows back through it); the "
     "same values, dims and markers. See dimtorch.ops.gradient.stop_gradient."},
    {nullptr}};
#undef FASTCALL

}  // namespace

bool export_ops_gradient(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
