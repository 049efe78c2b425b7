#include <string>

#include "lazygraph/detail/driver/device_buffer.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/driver/memcpy.hpp"
#include "lazygraph/detail/driver/pinned_buffer.hpp"

namespace lazygraph::detail {

Allocation::Allocation(const Device& device, std::size_t bytes, std::string_view what)
    : device_(device),
      address_(bytes == 0 ? 0 : driver::memory_allocate(device.context(), bytes, what)),
      bytes_(bytes) {}

Allocation::~Allocation() { driver::memory_free_no_throw(device_.context(), address_, bytes_); }

void throw_byte_overflow(std::size_t count, std::size_t element_size, std::string_view what) {
  throw UsageError(std::string(what) + " of " + std::to_string(count) + " elements of " + std::to_string(element_size) +
                   " bytes: the byte count does not fit in 64 bits");
}

void throw_moved_from(std::string_view what) {
  throw UsageError("use of a moved-from " + std::string(what) + ": it no longer owns memory");
}

void* pinned_allocate(const Device& device, std::size_t bytes, std::string_view what) {
  return driver::pinned_allocate(device.context(), bytes, what);
}

void pinned_free(const Device& device, void* ptr, std::size_t bytes) noexcept {
  driver::pinned_free_no_throw(device.context(), ptr, bytes);
}

void throw_size_mismatch(std::string_view what, std::size_t dst, std::size_t src) {
  throw UsageError(std::string(what) + ": the destination holds " + std::to_string(dst) +
                   " elements but the source holds " + std::to_string(src) + "; the sizes must match");
}

void copy_h2d(const Stream& s, CUdeviceptr dst, const void* src, std::size_t bytes) {
  driver::copy_host_to_device(s.device().context(), dst, src, bytes, s.get());
}

void copy_d2h(const Stream& s, void* dst, CUdeviceptr src, std::size_t bytes) {
  driver::copy_device_to_host(s.device().context(), dst, src, bytes, s.get());
}

void copy_d2d(const Stream& s, CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  driver::copy_device_to_device(s.device().context(), dst, src, bytes, s.get());
}

}  // namespace lazygraph::detail
