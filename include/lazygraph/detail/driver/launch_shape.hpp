#pragma once
/// \file
/// LaunchShape: the geometry of one kernel launch as the driver takes it (grid, block, dynamic shared memory,
/// programmatic launch, clusters, carveout). Kept apart from driver_api.hpp so that the headers that describe a launch
/// (ExecContext's KernelSubmission, NodePlan) do not bring in the raw driver entry points.

namespace lazygraph::detail::driver {

/// Grid and block in three dimensions, dynamic shared memory in bytes, whether the launch may start before the
/// kernel before it ends (programmatic stream serialization, sm_90 and newer), and the blocks of a thread block
/// cluster (all 1: none), and the preferred shared memory carveout in percent (-1: none).
struct LaunchShape {
  unsigned grid[3] = {};
  unsigned block[3] = {};
  unsigned shared_bytes = 0;
  bool early_launch = false;
  unsigned cluster[3] = {1, 1, 1};
  int carveout = -1;
  /// Whether the launch groups its blocks into clusters.
  [[nodiscard]] bool clustered() const noexcept { return cluster[0] * cluster[1] * cluster[2] > 1; }
};

}  // namespace lazygraph::detail::driver
