#pragma once
/// \file
/// Layer 1, the driver: devices, streams, events, device and pinned memory, copies, loaded modules, errors, NCCL
/// communicators.
/// The CUDA driver and NCCL are loaded at run time; nothing here links libcuda or libnccl. The raw driver entry
/// points (detail/driver/driver_api.hpp) are the library's own and not exported here.

#include <string>

#include "lazygraph/driver/bfloat16.hpp"
#include "lazygraph/driver/communicator.hpp"
#include "lazygraph/driver/device.hpp"
#include "lazygraph/driver/device_buffer.hpp"
#include "lazygraph/driver/device_span.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/half.hpp"
#include "lazygraph/driver/kernel_module.hpp"
#include "lazygraph/driver/live_handles.hpp"
#include "lazygraph/driver/memcpy.hpp"
#include "lazygraph/driver/peer_exchange.hpp"
#include "lazygraph/driver/pinned_buffer.hpp"
#include "lazygraph/driver/staging_buffer.hpp"
#include "lazygraph/driver/stream.hpp"
#include "lazygraph/driver/symmetric_buffer.hpp"

namespace lazygraph {

/// True when the CUDA driver loads and reports at least one device; otherwise false with the reason in
/// `why` (when given), such as "cannot load CUDA driver (libcuda.so.1): ...". Never throws.
bool gpu_available(std::string* why = nullptr) noexcept;

}  // namespace lazygraph
