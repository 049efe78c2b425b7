#pragma once
/// \file
/// Device: a GPU and its primary context, with the properties and limits the rest of the library checks
/// against. A Device is a cheap, copyable handle; the primary context stays retained while any Device,
/// Stream, buffer, module or graph made from it is alive.

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lazygraph {

class Stream;

/// Compute capability, e.g. {9, 0} for Hopper.
struct ComputeCapability {
  /// The major version: 9 for 9.0.
  int major = 0;
  /// The minor version: 0 for 9.0.
  int minor = 0;
  /// The form NVRTC and nvcc use: 90 for 9.0.
  [[nodiscard]] constexpr int as_int() const noexcept { return major * 10 + minor; }
  /// Same major and minor.
  friend constexpr bool operator==(ComputeCapability, ComputeCapability) = default;
};

/// The launch limits of a device, read once when the Device is opened.
struct DeviceLimits {
  /// Threads in one block, all dimensions together.
  int max_threads_per_block = 0;
  /// Threads per block along x, y, z.
  int max_block_dim[3] = {};
  /// Blocks per grid along x, y, z.
  int max_grid_dim[3] = {};
  int max_shared_per_block = 0;        ///< bytes a block gets without opting in
  int max_shared_per_block_optin = 0;  ///< bytes a block may get after raising the kernel's attribute
};

namespace detail {

/// The state a Device handle shares: the retained primary context and the properties read at open.
struct DeviceState {
  DeviceState(int ordinal, CUdevice device);
  ~DeviceState();
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  int ordinal;
  CUdevice device;
  CUcontext context;
  std::string name;
  ComputeCapability capability;
  int sm_count;
  std::size_t total_memory;
  DeviceLimits limits;

  /// Idle streams handed back by pooled Stream handles (Stream::pooled), destroyed with the state.
  mutable std::mutex stream_pool_mutex;
  mutable std::vector<CUstream> stream_pool;
};

}  // namespace detail

/// A GPU and its primary context, as a cheap copyable handle: copies refer to the same device and share its state.
///
/// Thread safety: a Device may be shared by any number of threads; every call on it is safe concurrently.
class Device {
 public:
  // Copy only: a move is a copy (one atomic increment), so a moved-from Device stays a valid handle.
  /// Another handle to the same device (never a move: the source stays valid).
  Device(const Device&) = default;
  /// Makes this a handle to `other`'s device.
  Device& operator=(const Device&) = default;
  ~Device() = default;

  /// The number of CUDA devices; 0 when the driver loads but finds none.
  /// \throws DriverUnavailable when there is no driver.
  static int count();
  /// The first device. \throws DriverUnavailable without a driver, NoDevice without a GPU.
  static Device first();
  /// The device with this ordinal. \throws DriverUnavailable without a driver, NoDevice when there is none.
  static Device get(int ordinal);

  /// The driver's index of this device, from 0.
  [[nodiscard]] int ordinal() const noexcept { return state_->ordinal; }
  /// The product name the driver reports, e.g. "NVIDIA H100 80GB HBM3".
  [[nodiscard]] const std::string& name() const noexcept { return state_->name; }
  /// The compute capability, which chooses the architecture kernels are compiled for.
  [[nodiscard]] ComputeCapability compute_capability() const noexcept { return state_->capability; }
  /// The number of streaming multiprocessors.
  [[nodiscard]] int sm_count() const noexcept { return state_->sm_count; }
  /// Device memory in bytes, free or not.
  [[nodiscard]] std::size_t total_memory() const noexcept { return state_->total_memory; }
  /// Device memory free now, in bytes (asks the driver).
  [[nodiscard]] std::size_t free_memory() const;
  /// Whether kernels on this device can read and write `other`'s memory directly (NVLink, or PCIe where the GPUs
  /// allow it; cuDeviceCanAccessPeer): what PeerExchange needs of every pair of ranks' GPUs. False for itself.
  [[nodiscard]] bool can_access_peer(const Device& other) const;
  /// The launch limits launches are checked against.
  [[nodiscard]] const DeviceLimits& limits() const noexcept { return state_->limits; }

  /// A new non-blocking stream on this device.
  [[nodiscard]] Stream create_stream() const;
  /// Blocks until all work on this device has finished.
  void synchronize() const;

  /// The primary context. Every library call that needs it makes it current for the call, on whichever thread
  /// (and restores the context that thread had current before, if any).
  [[nodiscard]] CUcontext context() const noexcept { return state_->context; }
  /// The shared state (primary context, properties, stream pool); holding it keeps the primary context retained.
  [[nodiscard]] const std::shared_ptr<const detail::DeviceState>& state() const noexcept { return state_; }

  /// True for copies of one handle. Two calls of get() (or first()) for one GPU give handles that compare unequal,
  /// although they share the primary context.
  friend bool operator==(const Device& a, const Device& b) noexcept { return a.state_ == b.state_; }

 private:
  explicit Device(std::shared_ptr<const detail::DeviceState> state) : state_(std::move(state)) {}
  std::shared_ptr<const detail::DeviceState> state_;
};

/// What lazygraph found of the CUDA driver, for reports such as lazygraph-info's (gpu_available, in driver.hpp, is
/// the yes-or-no question).
struct DriverInfo {
  bool loaded = false;  ///< the driver library opened and cuInit succeeded
  /// The CUDA version the driver supports, as it reports it (13000 for 13.0); 0 when it did not load or did not say.
  int version = 0;
  /// Empty, or why the driver did not load (the reason gpu_available gives, such as "cannot load CUDA driver
  /// (libcuda.so.1): ..."), or, when it loaded, why `version` is unknown.
  std::string why;
};

/// Loads the driver unless that was tried already (once per process, as gpu_available and Device do) and says what
/// it found. Never throws: a failure is in DriverInfo::why.
[[nodiscard]] DriverInfo driver_info() noexcept;

}  // namespace lazygraph
