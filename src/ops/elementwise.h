// Elementwise ops on Tensors: alignment by dim identity, then one torch call on the raws.
#pragma once
#include "core/common.h"
#include "core/plan.h"

namespace dimtorch {

enum class Bin : int {
  kAdd, kSub, kMul, kTrueDiv, kFloorDiv, kMod, kPow, kBitAnd, kBitOr, kBitXor,
  kEq, kNe, kLt, kLe, kGt, kGe, kMaximum, kMinimum, kLogicalAnd, kLogicalOr, kSquaredDifference,
  kLogAddExp,
};

/// Operands aligned to one output: the raws (or scalars) to hand to torch, and the output dims.
struct Aligned {
  Ref args[kMaxOperands];       // aligned raw, or the scalar/None passed through
  PyObject* out_dims = nullptr; // borrowed from an operand, or from out_dims_owned
  Ref out_dims_owned;           // made for this call when no operand has all output dims
  Py_ssize_t sizes[kMaxDims];
  int n_out = 0;
  PyObject* sparse_dim = nullptr;   // borrowed: the common sparse dim of the tensor operands
  PyObject* feature_dim = nullptr;  // borrowed
  PlanRef plan;
};

/// Aligns n operands (Tensors, Python scalars, or None where `allow_none`) by dim identity.
bool align_operands(PyObject* const* ops, int n, bool allow_broadcast_all, bool allow_none,
                    const char* caller, const char* const* names, Aligned* out);

/// a <op> b for Tensors and Python scalars (at least one Tensor); errors name `caller`. `by_rule`:
/// the caller (an operator, combine/compare without allow_broadcast_all_sources) leaves an outer
/// broadcast to the process's rule (operators_broadcast_all_sources, which dimtorch.rf turns on).
PyObject* binary_op(Bin k, PyObject* a, PyObject* b, bool allow_broadcast_all, const char* caller,
                    bool by_rule = false);


}  // namespace dimtorch
