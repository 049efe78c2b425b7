#pragma once
/// \file
/// Counts of the driver objects lazygraph holds, for leak checks: `live_handles()` now, compared with the counts
/// before some work. The counting itself is in src/driver/driver_api.cpp, where every driver object is made and
/// destroyed.

namespace lazygraph {

/// How many driver objects this process holds through lazygraph right now, by kind, and the bytes of device and
/// pinned memory they own. Counted on create and destroy (an atomic add each), so that tests and users can check
/// that nothing leaked: after any sequence of operations that ends where it began, the counts are back where they
/// were.
struct LiveHandles {
  long long device_allocations = 0;  ///< device memory allocations (DeviceBuffer's; not a graph's scratch memory)
  long long device_bytes = 0;        ///< the bytes they hold
  long long pinned_allocations = 0;  ///< pinned host memory allocations (PinnedBuffer's, StagingBuffer's)
  long long pinned_bytes = 0;        ///< the bytes they hold
  long long streams = 0;             ///< streams, the pooled ones included
  long long events = 0;              ///< events
  long long modules = 0;             ///< loaded kernel modules
  long long graphs = 0;              ///< CUDA graphs (templates, not executable)
  long long graph_execs = 0;         ///< executable (instantiated) graphs
  /// Equal when every count is.
  friend bool operator==(const LiveHandles&, const LiveHandles&) = default;
};

/// The counts now, each read on its own: cheap, but not one consistent snapshot while other threads work. Never
/// throws; needs no driver (all zeros before the first driver object).
[[nodiscard]] LiveHandles live_handles() noexcept;

}  // namespace lazygraph
