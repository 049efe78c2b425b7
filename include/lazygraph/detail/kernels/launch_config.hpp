#pragma once
/// \file
/// Launch configurations: grid, block and dynamic shared memory.

#include <cstddef>

namespace lazygraph {

struct Dim3 {
  unsigned x = 1;
  unsigned y = 1;
  unsigned z = 1;
  [[nodiscard]] constexpr std::size_t volume() const noexcept { return static_cast<std::size_t>(x) * y * z; }
};

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  unsigned shared_bytes = 0;  ///< dynamic shared memory per block
};

/// A 1-D configuration with enough blocks of `block_size` threads to cover `n` elements (at least one block,
/// so the kernel must still test its index against n).
constexpr LaunchConfig grid_for(std::size_t n, unsigned block_size, unsigned shared_bytes = 0) {
  const std::size_t blocks = block_size == 0 ? 0 : (n + block_size - 1) / block_size;
  return {{static_cast<unsigned>(blocks == 0 ? 1 : blocks), 1, 1}, {block_size, 1, 1}, shared_bytes};
}

}  // namespace lazygraph
