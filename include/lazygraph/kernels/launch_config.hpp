#pragma once
/// \file
/// Launch configurations: grid, block and dynamic shared memory.

#include <cstddef>

namespace lazygraph {

/// Grid or block dimensions: blocks, or threads, along x, y and z (1 where unused).
struct Dim3 {
  /// Extent along x.
  unsigned x = 1;
  /// Extent along y.
  unsigned y = 1;
  /// Extent along z.
  unsigned z = 1;
  /// `x * y * z`: the threads in a block, or the blocks in a grid.
  [[nodiscard]] constexpr std::size_t volume() const noexcept { return static_cast<std::size_t>(x) * y * z; }
};

/// The most blocks LaunchConfig::cluster may group: the portable cluster size of sm_90.
inline constexpr unsigned kMaxClusterBlocks = 8;

/// How to launch a kernel. grid_for makes the usual 1-D one; launches check it against the kernel's and the
/// device's limits.
struct LaunchConfig {
  /// Blocks per grid.
  Dim3 grid;
  /// Threads per block.
  Dim3 block;
  unsigned shared_bytes = 0;  ///< dynamic shared memory per block
  /// Programmatic dependent launch (Hopper and newer; ignored on older GPUs): the kernel may start while the
  /// kernel before it on the stream is still finishing, so its start-up and independent loads (weights) overlap
  /// that kernel's tail. Recorded into a graph, the dependency becomes a programmatic edge. Only correct for a
  /// kernel that calls `lg::wait_for_prior_grids()` (griddepcontrol.wait, kernels/include/lazygraph/
  /// kernel_common.cuh) before it reads or writes memory that earlier work touches; that wait returns once
  /// everything before the kernel has completed and its writes are visible.
  bool early_launch = false;
  /// Thread block clusters (sm_90 and newer): the grid's blocks in groups of `cluster` (x, y, z; the grid a multiple of
  /// it in each dimension, at most kMaxClusterBlocks blocks), each group scheduled at once on one GPC, so that its
  /// blocks can read each other's shared memory and meet at a cluster barrier (kernels/include/lazygraph/cluster.cuh).
  /// 1 x 1 x 1: no clusters. A launch with clusters on an older GPU, or of a shape outside these rules, is a
  /// UsageError.
  Dim3 cluster = {};
  /// The split of each multiprocessor's unified L1 and shared memory this launch prefers, in percent of the most
  /// shared memory one can have (CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT): 0 the most L1, 100 the most
  /// shared memory; -1 (the default) the kernel's own preference (Kernel::prefer_shared_carveout), else the driver's
  /// choice, which is the split that fits the most blocks of this launch. A hint: the driver takes a larger split
  /// when a block needs more shared memory than the preferred one holds. It matters beyond the launch, as the
  /// multiprocessors keep the split for the kernels after it that fit in it. Recorded into a graph, it is an
  /// attribute of the kernel node (cuda.h names the attribute for launches only; captures record it and nodes take it
  /// on driver 580, which the GPU tests check). Outside -1..100 a launch is a UsageError.
  int shared_carveout = -1;
};

/// `config` with programmatic dependent launch switched on (see LaunchConfig::early_launch).
constexpr LaunchConfig early(LaunchConfig config) {
  config.early_launch = true;
  return config;
}

/// `config` preferring `percent` of each multiprocessor's unified memory as shared memory for this launch
/// (see LaunchConfig::shared_carveout; 0 for the most L1).
constexpr LaunchConfig with_shared_carveout(LaunchConfig config, int percent) {
  config.shared_carveout = percent;
  return config;
}

namespace detail {
[[noreturn]] void throw_grid_too_large(std::size_t n, unsigned block_size);
}  // namespace detail

/// A 1-D configuration with enough blocks of `block_size` threads to cover `n` elements (at least one block,
/// so the kernel must still test its index against n).
/// \throws UsageError when that takes more than 2^32 - 1 blocks (a grid dimension cannot hold it; use a
///         grid-stride loop over a fixed grid instead). Launches check the device's own, lower limit.
constexpr LaunchConfig grid_for(std::size_t n, unsigned block_size, unsigned shared_bytes = 0) {
  const std::size_t blocks = block_size == 0 ? 0 : n / block_size + (n % block_size != 0 ? 1 : 0);
  if (blocks > 0xffffffffULL) detail::throw_grid_too_large(n, block_size);
  return {{static_cast<unsigned>(blocks == 0 ? 1 : blocks), 1, 1}, {block_size, 1, 1}, shared_bytes};
}

}  // namespace lazygraph
