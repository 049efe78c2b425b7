#pragma once
/// \file
/// Readable element-type names for error messages ("DeviceBuffer<float> of 4096 bytes").

#include <string_view>

namespace lazygraph::detail {

/// The name of T as the compiler spells it, e.g. "float" or "lazygraph::half".
template <class T>
constexpr std::string_view type_name() noexcept {
  std::string_view p = __PRETTY_FUNCTION__;  // "... type_name() [with T = float; ...]" (gcc) / "[T = float]" (clang)
  const auto start = p.find("T = ");
  if (start == std::string_view::npos) return "T";
  p.remove_prefix(start + 4);
  // gcc ends T at "; " (more template parameters follow), clang at the last ']'; T itself may hold "[3]".
  const auto semicolon = p.find(';');
  return p.substr(0, semicolon != std::string_view::npos ? semicolon : p.rfind(']'));
}

}  // namespace lazygraph::detail
