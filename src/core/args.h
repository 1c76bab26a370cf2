// Argument parsing for METH_FASTCALL | METH_KEYWORDS module functions (no tuple/dict building).
#pragma once
#include "core/backend.h"
#include "core/common.h"
#include "core/keyword_hints.h"
#include "core/tensor.h"

namespace dimtorch {

constexpr int kMaxArgNames = 12;

/// Interned str objects of a call site's `names` array (made on its first call), or NULL when the
/// table is full. Keyword names at Python call sites are interned constants, so a pointer compare
/// finds them; a string compare stays as the fallback.
inline PyObject* const* interned_names(const char* const* names, int n) {
  struct Entry {
    const char* const* names;
    PyObject* objs[kMaxArgNames];
  };
  static Entry table[128];
  if (n > kMaxArgNames) return nullptr;
  size_t slot = (reinterpret_cast<size_t>(names) >> 4) & 127;
  for (int probe = 0; probe < 128; ++probe, slot = (slot + 1) & 127) {
    Entry& e = table[slot];
    if (e.names == names) return e.objs;
    if (e.names) continue;
    for (int i = 0; i < n; ++i) {
      e.objs[i] = PyUnicode_InternFromString(names[i]);
      if (!e.objs[i]) {
        PyErr_Clear();
        for (int j = 0; j < i; ++j) Py_CLEAR(e.objs[j]);
        return nullptr;
      }
    }
    e.names = names;
    return e.objs;
  }
  return nullptr;
}

/// o when it is a live dimtorch.Tensor, else NULL with a TypeError naming the call and `what`.
inline PyObject* need_tensor(PyObject* o, const char* what, const char* caller) {
  if (is_tensor(o) && as_tensor(o)->raw) return o;
  if (is_template(o)) {
    PyErr_Format(PyExc_TypeError, "%s: %s is a template without a raw (dims: %s); assign its raw_tensor first",
                 caller, what, describe_dims(as_tensor(o)->dims, nullptr).c_str());
    return nullptr;
  }
  PyErr_Format(PyExc_TypeError, "%s: %s must be a dimtorch.Tensor, got %.80s", caller, what,
               Py_TYPE(o)->tp_name);
  return nullptr;
}

/// Fills out[0..n) from positional args and keywords matched against `names`. The first `n_pos`
/// names may be positional; the first `n_required` are required; the first `n_posonly` are
/// positional-only (a keyword of their name is an error). NULL entries are missing.
inline bool parse_args(PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames,
                       const char* const* names, int n, int n_pos, int n_required,
                       PyObject** out, const char* caller, int n_posonly = 0) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs > n_pos) {
    PyErr_Format(PyExc_TypeError, "%s takes at most %d positional arguments (%zd given)", caller,
                 n_pos, nargs);
    return false;
  }
  for (int i = 0; i < n; ++i) out[i] = i < nargs ? args[i] : nullptr;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  PyObject* const* interned = nkw ? interned_names(names, n) : nullptr;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    int i = 0;
    if (interned)
      while (i < n && interned[i] != key) ++i;
    if (!interned || i == n) {
      i = 0;
      while (i < n && PyUnicode_CompareWithASCIIString(key, names[i]) != 0) ++i;
    }
    if (i < n_posonly) {
      PyErr_Format(PyExc_TypeError, "%s got a positional-only argument passed as keyword argument: %R",
                   caller, key);
      return false;
    }
    if (i == n) {
      const char* k = PyUnicode_AsUTF8(key);
      if (!k) PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "%s got an unexpected keyword argument %R%s", caller, key,
                   torch_keyword_hint(k, names, n).c_str());
      return false;
    }
    if (out[i]) {
      PyErr_Format(PyExc_TypeError, "%s got multiple values for argument %R", caller, key);
      return false;
    }
    out[i] = args[nargs + k];
  }
  for (int i = 0; i < n_required; ++i)
    if (!out[i]) {
      PyErr_Format(PyExc_TypeError, "%s missing required argument '%s'", caller, names[i]);
      return false;
    }
  return true;
}

/// Truth of an optional flag argument (`absent` when not given). A torch or dimtorch Tensor is a
/// TypeError naming the call: its truth would read device data. -1 with error set.
inline int flag_arg(PyObject* v, int absent, const char* caller, const char* name) {
  if (!v) return absent;
  if (is_tensor_type(v) || backend::is_raw(v)) {
    PyErr_Format(PyExc_TypeError, "%s: %s must be a bool, got a %.80s", caller, name, Py_TYPE(v)->tp_name);
    return -1;
  }
  return PyObject_IsTrue(v);
}

}  // namespace dimtorch
