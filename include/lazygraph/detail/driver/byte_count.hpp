#pragma once
/// \file
/// Checked byte counts: `count` elements of `element_size` bytes, refused when the product does not fit in
/// std::size_t (where an unchecked product would wrap to a small number and allocate too little).

#include <cstddef>
#include <string_view>

namespace lazygraph::detail {

[[noreturn]] void throw_byte_overflow(std::size_t count, std::size_t element_size, std::string_view what);

/// `count * element_size`. \throws UsageError, naming `what` and both factors, when it overflows.
[[nodiscard]] inline std::size_t byte_count(std::size_t count, std::size_t element_size, std::string_view what) {
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(count, element_size, &bytes)) [[unlikely]]
    throw_byte_overflow(count, element_size, what);
  return bytes;
}

}  // namespace lazygraph::detail
