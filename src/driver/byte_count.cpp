#include "lazygraph/detail/driver/byte_count.hpp"

#include <string>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::detail {

void throw_byte_overflow(std::size_t count, std::size_t element_size, std::string_view what) {
  throw UsageError(std::string(what) + " of " + std::to_string(count) + " elements of " + std::to_string(element_size) +
                   " bytes: the byte count does not fit in 64 bits");
}

}  // namespace lazygraph::detail
