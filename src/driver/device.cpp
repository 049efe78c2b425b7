#include "lazygraph/driver/device.hpp"

#include <exception>
#include <string>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/stream.hpp"

namespace lazygraph {

namespace detail {

DeviceState::DeviceState(int ordinal_in, CUdevice device_in)
    : ordinal(ordinal_in),
      device(device_in),
      context(driver::primary_context_retain(device_in)),
      name(driver::device_name(device_in)),
      capability{driver::device_attribute(device_in, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                 driver::device_attribute(device_in, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)},
      sm_count(driver::device_attribute(device_in, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)),
      total_memory(driver::device_total_memory(device_in)) {
  using driver::device_attribute;
  limits.max_threads_per_block = device_attribute(device_in, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  limits.max_block_dim[0] = device_attribute(device_in, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  limits.max_block_dim[1] = device_attribute(device_in, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  limits.max_block_dim[2] = device_attribute(device_in, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  limits.max_grid_dim[0] = device_attribute(device_in, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  limits.max_grid_dim[1] = device_attribute(device_in, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  limits.max_grid_dim[2] = device_attribute(device_in, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  limits.max_shared_per_block = device_attribute(device_in, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  limits.max_shared_per_block_optin =
      device_attribute(device_in, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
}

DeviceState::~DeviceState() {
  for (CUstream s : stream_pool) driver::stream_destroy_no_throw(context, s);
  driver::primary_context_release_no_throw(device);
}

}  // namespace detail

int Device::count() { return detail::driver::device_count(); }

Device Device::first() { return get(0); }

Device Device::get(int ordinal) {
  const int n = count();
  if (n == 0) throw NoDevice("no CUDA device: the driver loaded but reports no GPU");
  if (ordinal < 0 || ordinal >= n) {
    throw NoDevice("no CUDA device " + std::to_string(ordinal) + ": there are " + std::to_string(n));
  }
  return Device(std::make_shared<const detail::DeviceState>(ordinal, detail::driver::device_get(ordinal)));
}

bool Device::can_access_peer(const Device& other) const {
  return ordinal() != other.ordinal() && detail::driver::device_can_access_peer(state_->device, other.state_->device);
}

std::size_t Device::free_memory() const {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  detail::driver::memory_info(state_->context, &free_bytes, &total_bytes);
  return free_bytes;
}

Stream Device::create_stream() const { return Stream(*this); }

void Device::synchronize() const { detail::driver::context_synchronize(state_->context); }

bool gpu_available(std::string* why) noexcept {
  if (!detail::driver::try_load(why)) return false;
  try {
    if (detail::driver::device_count() > 0) return true;
    if (why != nullptr) *why = "no CUDA device: the driver loaded but reports no GPU";
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
  }
  return false;
}

DriverInfo driver_info() noexcept {
  DriverInfo info;
  info.loaded = detail::driver::try_load(&info.why);
  if (!info.loaded) return info;
  try {
    info.version = detail::driver::driver_version();
  } catch (const std::exception& e) {
    info.why = e.what();
  }
  return info;
}

}  // namespace lazygraph
