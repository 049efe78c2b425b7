#pragma once
/// \file
/// Counts of the driver objects lazygraph holds, for leak checks. Kept apart from driver_api.hpp (the private
/// foreign-function layer, which counts them) so that the driver umbrella can export the counts without it.

namespace lazygraph::detail::driver {

/// How many driver objects this process holds through the driver wrappers right now, by kind, and the bytes of
/// device and pinned memory they own. Counted on create and destroy (an atomic add each), so that tests and
/// users can check that nothing leaked: after any sequence of operations that ends where it began, the
/// counts are back where they were.
struct LiveHandles {
  long long device_allocations = 0;
  long long device_bytes = 0;
  long long pinned_allocations = 0;
  long long pinned_bytes = 0;
  long long streams = 0;
  long long events = 0;
  long long modules = 0;
  long long graphs = 0;
  long long graph_execs = 0;
  friend bool operator==(const LiveHandles&, const LiveHandles&) = default;
};
/// The counts now (implemented in src/driver/driver_api.cpp). Never throws; needs no driver.
[[nodiscard]] LiveHandles live_handles() noexcept;

}  // namespace lazygraph::detail::driver
