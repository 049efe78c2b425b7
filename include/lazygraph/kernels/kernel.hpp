#pragma once
/// \file
/// Kernel<void(Params...)>: a typed handle to a compiled kernel. Arguments are checked against the declared
/// parameters at compile time (kernel_arguments.hpp); at lookup, the signature against the kernel's declaration
/// in its source, type by type (kernel_declaration.hpp), and against the compiled kernel's parameter sizes; at
/// launch, the configuration against the device's limits. Handles are cheap to copy: every handle to one
/// kernel shares its KernelInfo.

#include <cuda.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "lazygraph/detail/kernels/kernel_info.hpp"
#include "lazygraph/driver/device.hpp"
#include "lazygraph/driver/kernel_module.hpp"
#include "lazygraph/driver/stream.hpp"
#include "lazygraph/kernels/kernel_arguments.hpp"
#include "lazygraph/kernels/launch_config.hpp"
#include "lazygraph/kernels/launch_op.hpp"

namespace lazygraph {

namespace detail {
/// What a kernel call takes first (after the stream, for launch): a LaunchConfig, or what converts to one.
template <class T>
concept IsLaunchConfig = std::is_convertible_v<const T&, const LaunchConfig&>;
}  // namespace detail

/// A typed handle to a compiled kernel. Only `Kernel<void(Params...)>` is defined: kernels return void.
template <class Signature>
class Kernel;

/// A handle to a compiled kernel whose parameters are `Params...`, from KernelLibrary::get. What is checked, and
/// when, is in the file comment.
///
/// Every copy shares the kernel's KernelInfo, which keeps its module loaded (also after the KernelLibrary is gone).
///
/// Thread safety: handles, and copies of one, may launch from several threads at once.
template <class... Params>
class Kernel<void(Params...)> {
 public:
  /// Handles come from KernelLibrary::get.
  explicit Kernel(std::shared_ptr<detail::KernelInfo> info) : info_(std::move(info)) {}
  // Copy only: a move is a copy (one atomic increment), so a moved-from Kernel stays a valid handle.
  /// Another handle to the same kernel (never a move: the source stays valid).
  Kernel(const Kernel&) = default;
  /// Makes this a handle to `other`'s kernel.
  Kernel& operator=(const Kernel&) = default;
  ~Kernel() = default;

  /// Launches now on `stream` (asynchronously). The buffers of span arguments must outlive the kernel, as with any
  /// asynchronous launch: this call does not keep them (the lazy op below does, and a graph that records it).
  /// \throws UsageError for a configuration outside the device's limits; CudaError when the launch fails.
  template <class... Args>
  void launch(const Stream& stream, const LaunchConfig& config, const Args&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params),
                  "Kernel launch: the number of arguments must equal the kernel's parameter count; pass exactly "
                  "one argument per parameter of the declared signature");
    detail::validate_launch(*info_, config);
    ExecContext ctx(stream, false);
    detail::submit_launch(ctx, *info_, config, pack(std::index_sequence_for<Params...>{}, args...),
                          (std::size_t{0} + ... + detail::span_bytes_of(args)));
  }

  /// The launch as a lazy op: nothing runs until it is executed (`sync_on`) or recorded into a graph.
  /// Arguments are checked at compile time like `launch`'s; the configuration is checked now, on the host.
  /// The op shares ownership of every buffer passed as a span, and a graph that records it keeps them alive.
  template <class... Args>
  [[nodiscard]] LaunchOp<Params...> operator()(const LaunchConfig& config, const Args&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params),
                  "Kernel launch: the number of arguments must equal the kernel's parameter count; pass exactly "
                  "one argument per parameter of the declared signature");
    detail::validate_launch(*info_, config);
    return LaunchOp<Params...>(info_, config, pack(std::index_sequence_for<Params...>{}, args...),
                               {detail::owner_of(args)...}, (std::size_t{0} + ... + detail::span_bytes_of(args)),
                               typename LaunchOp<Params...>::Ranges{detail::argument_range<Params>(args)...});
  }

  // ---------------------------------------------------------------------------------------------------------
  // READ THIS IF YOUR COMPILE BREAKS HERE: a kernel call starts with its launch configuration, e.g.
  // `axpy(lg::grid_for(n, 256), 2.0F, x.cview(), y.view(), n)`; the static_assert below says so.
  // ---------------------------------------------------------------------------------------------------------
  /// A call whose first argument is not a LaunchConfig: never compiles; the static_assert names the fix.
  template <class First, class... Args>
  requires(!detail::IsLaunchConfig<First>) void operator()(const First& /*first*/, const Args&... /*args*/) const {
    constexpr bool first_argument_is_a_launch_config = detail::IsLaunchConfig<First>;
    static_assert(first_argument_is_a_launch_config,
                  "Kernel call: the first argument must be the launch configuration (a LaunchConfig); write "
                  "kernel(lg::grid_for(n, 256), args...), or kernel(LaunchConfig{grid, block, shared_bytes}, args...)");
  }
  /// A launch whose second argument is not a LaunchConfig: never compiles; the static_assert names the fix.
  template <class Second, class... Args>
  requires(!detail::IsLaunchConfig<Second>) void launch(const Stream& /*stream*/, const Second& /*second*/,
                                                        const Args&... /*args*/) const {
    constexpr bool second_argument_is_a_launch_config = detail::IsLaunchConfig<Second>;
    static_assert(second_argument_is_a_launch_config,
                  "Kernel::launch: the second argument must be the launch configuration (a LaunchConfig), after "
                  "the stream; write kernel.launch(stream, lg::grid_for(n, 256), args...)");
  }

  /// The kernel's (unmangled) name, e.g. "axpy".
  [[nodiscard]] const std::string& name() const noexcept { return info_->name; }
  /// The device the kernel is loaded on.
  [[nodiscard]] const Device& device() const noexcept { return info_->device; }
  /// How many blocks of `block_threads` threads with `dynamic_shared` bytes of dynamic shared memory each
  /// multiprocessor runs at once (the driver's occupancy calculation: registers, shared memory, launch bounds). Raises
  /// the kernel's dynamic shared memory limit to `dynamic_shared` first, as a launch with it would.
  /// Times Device::sm_count(), the grid a persistent kernel needs to fill the GPU.
  /// \throws CudaError when the driver refuses the shape (naming the kernel).
  [[nodiscard]] int max_active_blocks_per_sm(unsigned block_threads, unsigned dynamic_shared = 0) const {
    return detail::max_active_blocks_per_sm(*info_, block_threads, dynamic_shared);
  }
  /// Asks the driver to give the multiprocessors that run this kernel `percent` (0 to 100; -1: the driver's own
  /// choice, the default) of their unified L1 and shared memory as shared memory
  /// (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT; a hint the driver may round up to a size it supports).
  /// A multiprocessor whose memory is split for a kernel that uses little shared memory cannot take, beside it, a
  /// block that needs much: an early-launched kernel with large stages then waits for it to drain. Set on every
  /// handle to the kernel at once, for all its launches; LaunchConfig::shared_carveout sets one launch's, and takes
  /// precedence. The occupancy the driver computes (max_active_blocks_per_sm) follows this preference, not a
  /// launch's. \throws UsageError for a percentage outside -1..100; CudaError when the driver
  /// refuses (naming the kernel).
  void prefer_shared_carveout(int percent) const { detail::set_shared_carveout(*info_, percent); }
  /// The state every handle to this kernel shares (function, module, limits).
  [[nodiscard]] const std::shared_ptr<detail::KernelInfo>& info() const noexcept { return info_; }

  /// The checked parameter values for `args`, ready to launch (used by the lazy launch op).
  template <class... Args, std::size_t... I>
  static std::tuple<Params...> pack(std::index_sequence<I...> /*unused*/, const Args&... args) {
    return std::tuple<Params...>{detail::convert_argument<Params, static_cast<int>(I) + 1>(args)...};
  }

 private:
  std::shared_ptr<detail::KernelInfo> info_;
};

}  // namespace lazygraph
