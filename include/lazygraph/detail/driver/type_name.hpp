#pragma once
/// \file
/// Readable element-type names for error messages ("DeviceBuffer<float> of 4096 bytes").

#include <string_view>

namespace lazygraph::detail {

/// The name of T as the compiler spells it, e.g. "float" or "__half".
template <class T>
constexpr std::string_view type_name() noexcept {
  std::string_view p = __PRETTY_FUNCTION__;  // "... type_name() [with T = float; ...]" (gcc) / "[T = float]" (clang)
  const auto start = p.find("T = ");
  if (start == std::string_view::npos) return "T";
  p.remove_prefix(start + 4);
  const auto end = p.find_first_of(";]");
  return p.substr(0, end);
}

}  // namespace lazygraph::detail
