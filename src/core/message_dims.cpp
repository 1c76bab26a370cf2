// Telling apart different Dims of one name in error messages (only ever built on an error path).
#include "core/message_dims.h"

#include "core/dim.h"

namespace dimtorch {
namespace {

thread_local MessageDims* t_scope = nullptr;
Py_ssize_t g_next_message_id = 1;  // under the GIL

bool same_name(DimObject* a, DimObject* b) {
  if (!a->name || !b->name) return !a->name && !b->name;  // "<unnamed>" twice
  // Names are str (the constructor and setter check); comparing two str sets no error.
  return PyUnicode_Check(a->name) && PyUnicode_Check(b->name) &&
         PyUnicode_Compare(a->name, b->name) == 0;
}

bool namesake_in(PyObject* dim, PyObject* tuple) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); ++i) {
    PyObject* o = PyTuple_GET_ITEM(tuple, i);
    if (is_dim(o) && o != dim && same_name(as_dim(o), as_dim(dim))) return true;
  }
  return false;
}

}  // namespace

MessageDims::MessageDims(std::initializer_list<PyObject*> dims_or_tuples)
    : MessageDims(dims_or_tuples.begin(), static_cast<int>(dims_or_tuples.size())) {}

MessageDims::MessageDims(PyObject* const* dims_or_tuples, int n) : outer_(t_scope) {
  for (int k = 0; k < n; ++k) {
    PyObject* o = dims_or_tuples[k];
    if (!o) continue;
    if (is_dim(o)) {
      dims_.push_back(o);
    } else if (PyTuple_Check(o)) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
        if (is_dim(PyTuple_GET_ITEM(o, i))) dims_.push_back(PyTuple_GET_ITEM(o, i));
    }
  }
  t_scope = this;
}

MessageDims::~MessageDims() { t_scope = outer_; }

bool MessageDims::contains_namesake(PyObject* dim) const {
  for (PyObject* o : dims_)
    if (o != dim && same_name(as_dim(o), as_dim(dim))) return true;
  return false;
}

std::string MessageDims::namesakes_note() const {
  for (size_t i = 0; i < dims_.size(); ++i)
    for (size_t j = i + 1; j < dims_.size(); ++j)
      if (dims_[i] != dims_[j] && same_name(as_dim(dims_[i]), as_dim(dims_[j])))
        return "; " + describe_dim(dims_[i]) + " and " + describe_dim(dims_[j]) +
               " are different Dim objects with the same name";
  return "";
}

bool dim_has_namesake(PyObject* dim, PyObject* tuple) {
  if (!is_dim(dim)) return false;
  if (tuple && namesake_in(dim, tuple)) return true;
  return t_scope && t_scope->contains_namesake(dim);  // the innermost scope is the message's
}

std::string dim_message_id(PyObject* dim) {
  DimObject* d = as_dim(dim);
  if (d->message_id == 0) d->message_id = g_next_message_id++;
  return "#" + std::to_string(d->message_id);
}

}  // namespace dimtorch
