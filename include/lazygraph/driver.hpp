#pragma once
/// \file
/// Layer 1, the driver: devices, streams, events, device and pinned memory, copies, loaded modules, errors, NCCL
/// communicators.
/// The CUDA driver and NCCL are loaded at run time; nothing here links libcuda or libnccl. The raw driver entry
/// points (detail/driver/driver_api.hpp) are the library's own and not exported here.

#include <string>

#include "lazygraph/detail/driver/bfloat16.hpp"
#include "lazygraph/detail/driver/communicator.hpp"
#include "lazygraph/detail/driver/device.hpp"
#include "lazygraph/detail/driver/device_buffer.hpp"
#include "lazygraph/detail/driver/device_span.hpp"
#include "lazygraph/detail/driver/error.hpp"
#include "lazygraph/detail/driver/half.hpp"
#include "lazygraph/detail/driver/kernel_module.hpp"
#include "lazygraph/detail/driver/live_handles.hpp"
#include "lazygraph/detail/driver/memcpy.hpp"
#include "lazygraph/detail/driver/nccl_api.hpp"
#include "lazygraph/detail/driver/pinned_buffer.hpp"
#include "lazygraph/detail/driver/staging_buffer.hpp"
#include "lazygraph/detail/driver/stream.hpp"
#include "lazygraph/detail/driver/symmetric_buffer.hpp"

namespace lazygraph {

/// True when the CUDA driver loads and reports at least one device; otherwise false with the reason in
/// `why` (when given), such as "cannot load CUDA driver (libcuda.so.1): ...". Never throws.
bool gpu_available(std::string* why = nullptr) noexcept;

/// Counts of the driver objects (allocations and their bytes, streams, events, modules, graphs) lazygraph holds
/// right now. For leak checks: after work that ends where it began, the counts are back where they were.
using LiveHandles = detail::driver::LiveHandles;
/// The counts now, each read on its own: cheap, but not one consistent snapshot while other threads work.
[[nodiscard]] inline LiveHandles live_handles() noexcept { return detail::driver::live_handles(); }

}  // namespace lazygraph
