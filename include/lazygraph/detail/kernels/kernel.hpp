#pragma once
/// \file
/// Kernel<void(Params...)>: a typed handle to a compiled kernel. Arguments are checked against the declared
/// parameters at compile time (kernel_arguments.hpp); at lookup, the declaration is checked against the
/// compiled kernel's parameter count and sizes; at launch, the configuration against the device's limits.

#include <cuda.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "lazygraph/detail/driver/device.hpp"
#include "lazygraph/detail/driver/module.hpp"
#include "lazygraph/detail/driver/stream.hpp"
#include "lazygraph/detail/kernels/kernel_arguments.hpp"
#include "lazygraph/detail/kernels/launch_config.hpp"

namespace lazygraph {

namespace detail {

/// What every handle to one kernel shares.
struct KernelInfo {
  explicit KernelInfo(Device d) : device(std::move(d)) {}

  CUfunction function = nullptr;
  std::string name;
  std::shared_ptr<const LoadedModule> module;  ///< keeps the code loaded while any handle lives
  Device device;
  int max_threads_per_block = 0;  ///< this kernel's own limit (registers can make it lower than the device's)
  int static_shared_bytes = 0;
  std::atomic<int> dynamic_shared_limit{0};  ///< the kernel's current max-dynamic-shared attribute
};

/// \throws UsageError when `config` is outside the kernel's or the device's limits, naming which.
void validate_launch(const KernelInfo& kernel, const LaunchConfig& config);
/// Launches (after raising the kernel's dynamic shared memory limit when `config` needs more).
void launch_kernel(KernelInfo& kernel, const LaunchConfig& config, CUstream stream, void** args);

}  // namespace detail

template <class Signature>
class Kernel;

template <class... Params>
class Kernel<void(Params...)> {
 public:
  /// Handles come from KernelLibrary::get.
  explicit Kernel(std::shared_ptr<detail::KernelInfo> info) : info_(std::move(info)) {}

  /// Launches now on `stream` (asynchronously).
  /// \throws UsageError for a configuration outside the device's limits; CudaError when the launch fails.
  template <class... Args>
  void launch(const Stream& stream, const LaunchConfig& config, const Args&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params),
                  "Kernel launch: the number of arguments must equal the kernel's parameter count; pass exactly "
                  "one argument per parameter of the declared signature");
    detail::validate_launch(*info_, config);
    auto params = pack(std::index_sequence_for<Params...>{}, args...);
    launch_packed(stream.get(), config, params, std::index_sequence_for<Params...>{});
  }

  [[nodiscard]] const std::string& name() const noexcept { return info_->name; }
  [[nodiscard]] const Device& device() const noexcept { return info_->device; }
  [[nodiscard]] const std::shared_ptr<detail::KernelInfo>& info() const noexcept { return info_; }

  /// The checked parameter values for `args`, ready to launch (used by the lazy launch op).
  template <class... Args, std::size_t... I>
  static std::tuple<Params...> pack(std::index_sequence<I...> /*unused*/, const Args&... args) {
    return std::tuple<Params...>{detail::convert_argument<Params>(args)...};
  }

  /// Launches with parameter values already packed.
  template <std::size_t... I>
  void launch_packed(CUstream stream, const LaunchConfig& config, std::tuple<Params...>& params,
                     std::index_sequence<I...> /*unused*/) const {
    std::array<void*, sizeof...(Params) + 1> pointers{static_cast<void*>(&std::get<I>(params))..., nullptr};
    detail::launch_kernel(*info_, config, stream, pointers.data());
  }

 private:
  std::shared_ptr<detail::KernelInfo> info_;
};

}  // namespace lazygraph
