// Hints for keywords that torch users type out of habit (dim=, keepdim=); error paths only.
#pragma once
#include "core/common.h"

#include <cstring>
#include <string>

namespace dimtorch {

/// " (dimtorch names an axis by its Dim, not a number: use axis=<Dim>)" for an unexpected keyword
/// `key` that torch would take; `names` (may be NULL) are the call's own keywords, so that the
/// hint names the one that plays torch's part. "" for any other keyword.
inline std::string torch_keyword_hint(const char* key, const char* const* names, int n) {
  if (!key) return "";
  if (std::strcmp(key, "keepdim") == 0)
    return " (dimtorch has no keepdim: the result keeps its other dims, and ops align operands by "
           "dim, so it broadcasts against the input as it is)";
  if (std::strcmp(key, "dim") != 0) return "";
  for (const char* want : {"axis", "axes", "reduce", "in_spatial_dim", "in_spatial_dims", "spatial_dim", "in_dim", "dims"})
    for (int i = 0; names && i < n; ++i)
      if (std::strcmp(names[i], want) == 0)
        return std::string(" (dimtorch names an axis by its Dim, not a number: use ") + want + "=)";
  return " (dimtorch names an axis by its Dim, not a number: pass it by the call's own Dim "
         "keyword, see its help())";
}

/// The same for Python's "f() got an unexpected keyword argument 'dim'" in `text`, without the
/// call's keywords (their hint is generic).
inline std::string torch_keyword_hint_for_message(const char* text) {
  const char* marker = "got an unexpected keyword argument '";
  const char* at = text ? std::strstr(text, marker) : nullptr;
  if (!at) return "";
  std::string key(at + std::strlen(marker));
  key = key.substr(0, key.find('\''));
  return torch_keyword_hint(key.c_str(), nullptr, 0);
}

}  // namespace dimtorch
