#include "lazygraph/driver/device_buffer.hpp"

#include <string>
#include <utility>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph::detail {

Allocation::Allocation(const Device& device, std::size_t bytes, std::string_view what)
    : device_(device),
      address_(bytes == 0 ? 0 : driver::memory_allocate(device.context(), bytes, what)),
      bytes_(bytes) {}

Allocation::Allocation(const Device& device, CUdeviceptr address, std::size_t bytes,
                       std::shared_ptr<const void> keep) noexcept
    : device_(device), address_(address), bytes_(bytes), keep_(std::move(keep)) {}

Allocation::~Allocation() {
  if (!keep_) driver::memory_free_no_throw(device_.context(), address_, bytes_);
}

void throw_moved_from(std::string_view what) {
  throw UsageError("use of a moved-from " + std::string(what) + ": it no longer owns memory");
}

}  // namespace lazygraph::detail
