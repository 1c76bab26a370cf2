// Derived properties of Tensor and Dim that read fast in eager and trace as Python under
// torch.compile (see property.cpp).
#pragma once
#include "core/common.h"

namespace dimtorch {

/// Replaces `type`'s getset entries named in `names` (a NULL-terminated list) by properties whose
/// C getter is the getset's and whose Python definition is set later (_set_property_definition).
bool make_traceable_properties(PyTypeObject* type, const char* const* names);


}  // namespace dimtorch
