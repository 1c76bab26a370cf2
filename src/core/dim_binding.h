// Dims declared once and bound to each batch's lengths (RETURNN's `dim.dyn_size_ext = ...`), and the
// RETURNN attributes of a Dim that no op reads (kind, description, ...). Both live in a DimExtra that
// a dim gets on first use: the dims an op makes never have one.
#pragma once
#include <vector>

#include "core/common.h"
#include "core/dim.h"

namespace dimtorch {

struct DimExtra {
  PyObject* attrs = nullptr;             // dict of RETURNN's attributes (kind, description, ...), or NULL
  PyObject* lengths_template = nullptr;  // lengths declared without data (a template Tensor), or NULL
  PyObject* bound_size = nullptr;        // 0-dim Tensor: the size bound to a size-from-data dim, or NULL
  /* Weak refs to the dims A + d made by dim math with this dim as B: A's cache owns them, so this
     is how binding d reaches them. Dead ones are dropped when one is added. */
  std::vector<PyObject*> dependents;
};

/// Releases a dim's extra (dealloc, GC clear).
void dim_extra_free(DimObject* d);
int dim_extra_traverse(DimObject* d, visitproc visit, void* arg);
/// Notes that `derived` (A + b) takes lengths from `b`, so that binding b resets it. False with an
/// error set when out of memory.
bool dim_note_dependent(DimObject* b, PyObject* derived);

}  // namespace dimtorch
