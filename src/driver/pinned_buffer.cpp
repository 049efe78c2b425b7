#include "lazygraph/driver/pinned_buffer.hpp"

#include "lazygraph/detail/driver/driver_api.hpp"

namespace lazygraph::detail {

void* pinned_allocate(const Device& device, std::size_t bytes, std::string_view what) {
  return driver::pinned_allocate(device.context(), bytes, what);
}

void pinned_free(const Device& device, void* ptr, std::size_t bytes) noexcept {
  driver::pinned_free_no_throw(device.context(), ptr, bytes);
}

}  // namespace lazygraph::detail
