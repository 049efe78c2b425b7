#include "lazygraph/kernels/launch_config.hpp"

#include <string>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::detail {

void throw_grid_too_large(std::size_t n, unsigned block_size) {
  throw UsageError("grid_for(" + std::to_string(n) + ", " + std::to_string(block_size) +
                   "): " + std::to_string(n / block_size + 1) +
                   " blocks do not fit in a grid dimension (at most 2^32 - 1); use a grid-stride loop over a "
                   "fixed grid instead");
}

}  // namespace lazygraph::detail
