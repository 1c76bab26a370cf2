// Shared low-level helpers of the C++ core: owning references, limits, error formatting.
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstddef>
#include <string>
#include <utility>

namespace dimtorch {

/// Most dims a Tensor may have (alignment plans use fixed arrays of this size).
constexpr int kMaxDims = 24;

/// Owning reference to a Python object; releases it when it goes out of scope.
class Ref {
 public:
  Ref() = default;
  explicit Ref(PyObject* p) : p_(p) {}
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  Ref(Ref&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  Ref& operator=(Ref&& o) noexcept {
    if (this != &o) {
      Py_XDECREF(p_);
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  ~Ref() { Py_XDECREF(p_); }
  static Ref borrow(PyObject* p) {
    Py_XINCREF(p);
    return Ref(p);
  }
  PyObject* get() const { return p_; }
  PyObject* release() {
    PyObject* r = p_;
    p_ = nullptr;
    return r;
  }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  PyObject* p_ = nullptr;
};

/// Identity hash, as object.__hash__ computes it.
inline Py_hash_t identity_hash(PyObject* o) {
  size_t y = reinterpret_cast<size_t>(o);
  y = (y >> 4) | (y << (8 * sizeof(void*) - 4));
  Py_hash_t h = static_cast<Py_hash_t>(y);
  return h == -1 ? -2 : h;
}

/// str(o) as std::string, for error messages only.
std::string to_std_string(PyObject* o);

/// A Python scalar that ops keep as a scalar (bool, int, float, complex).
inline bool is_python_scalar(PyObject* o) {
  return PyFloat_CheckExact(o) || PyLong_CheckExact(o) || PyBool_Check(o) ||
         PyComplex_CheckExact(o);
}

/// A new tuple of the n ints in sizes (a shape argument for torch).
inline PyObject* size_tuple(const Py_ssize_t* sizes, Py_ssize_t n) {
  Ref t(PyTuple_New(n));
  if (!t) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* v = PyLong_FromSsize_t(sizes[i]);
    if (!v) return nullptr;
    PyTuple_SET_ITEM(t.get(), i, v);
  }
  return t.release();
}

}  // namespace dimtorch
