// Telling apart different Dims of one name in error messages (only ever built on an error path).
#pragma once
#include "core/common.h"

#include <initializer_list>
#include <vector>

namespace dimtorch {

/// The dims one error message shows (Dims, and tuples of Dims). While a scope is alive on this
/// thread, describe_dim and describe_dims append `#id` to a dim when another Dim object of the
/// same name is in the scope (describe_dims does so within its own tuple without a scope), so
/// that two distinct 'feature'(80) read 'feature'(80)#1 and 'feature'(80)#2.
class MessageDims {
 public:
  explicit MessageDims(std::initializer_list<PyObject*> dims_or_tuples);
  MessageDims(PyObject* const* dims_or_tuples, int n);
  ~MessageDims();
  MessageDims(const MessageDims&) = delete;
  MessageDims& operator=(const MessageDims&) = delete;
  /// Whether a Dim object other than `dim` in the scope has its name.
  bool contains_namesake(PyObject* dim) const;
  /// "; 'feature'(80)#1 and 'feature'(80)#2 are different Dim objects with the same name" for
  /// the first such pair, or "" when there is none.
  std::string namesakes_note() const;

 private:
  std::vector<PyObject*> dims_;  // borrowed: the message is built while the caller holds them
  MessageDims* outer_;
};

/// Whether `dim` shares its name with another Dim object in the current scope or in `tuple`
/// (may be NULL).
bool dim_has_namesake(PyObject* dim, PyObject* tuple);
/// "#id": a per-Dim number, given on first use (from 1, in order of first use) and kept.
std::string dim_message_id(PyObject* dim);

}  // namespace dimtorch
