#pragma once
/// \file
/// What every handle to one compiled kernel shares, and the host-side launch checks.

#include <cuda.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "lazygraph/detail/driver/launch_shape.hpp"
#include "lazygraph/driver/device.hpp"
#include "lazygraph/driver/device_span.hpp"
#include "lazygraph/driver/kernel_module.hpp"
#include "lazygraph/kernels/launch_config.hpp"
#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {

namespace detail {

/// The owner of the memory `arg` views, when it is a span; null otherwise.
template <class Arg>
std::shared_ptr<const void> owner_of(const Arg& arg) {
  if constexpr (requires { arg.owner(); }) {
    return arg.owner();
  } else {
    return nullptr;
  }
}

/// What every handle to one kernel shares. There is exactly one per loaded function (KernelLibrary makes it
/// when loading the module and hands the same one to every `get`): the dynamic shared memory limit is a
/// property of the function, and two records of it would let one handle lower what another relies on.
/// Whoever holds it (a handle, a launch op, a graph that recorded the launch) keeps the module loaded.
struct KernelInfo {
  explicit KernelInfo(const Device& d) : device(d) {}

  CUfunction function = nullptr;
  std::string name;
  std::shared_ptr<const LoadedModule> module;  ///< keeps the code loaded while this lives
  Device device;
  int max_threads_per_block = 0;  ///< this kernel's own limit (registers can make it lower than the device's)
  int static_shared_bytes = 0;
  /// The function's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as last set; only ever raised, under
  /// `dynamic_shared_mutex` (read without it on the launch path: a stale lower value only costs the lock).
  std::atomic<int> dynamic_shared_limit{0};
  std::mutex dynamic_shared_mutex;
};

/// The KernelInfo of kernel `name` in `module`, loaded on `device`: its function and limits (threads per block,
/// static shared memory, the dynamic shared memory that leaves). The one place that reads them, for KernelLibrary
/// and the fused expressions alike. \throws UsageError when the module has no such kernel; CudaError when the driver
/// refuses an attribute query.
std::shared_ptr<KernelInfo> make_kernel_info(const Device& device, std::shared_ptr<const LoadedModule> module,
                                             const std::string& name);

/// The bytes of the memory `arg` views, when it is a span; 0 otherwise.
template <class Arg>
std::size_t span_bytes_of(const Arg& arg) {
  if constexpr (requires { arg.size_bytes(); }) {
    return arg.size_bytes();
  } else {
    return 0;
  }
}

/// The memory one launch argument lets the kernel touch: a span's range, read-only for a `const T*` parameter;
/// nothing for a scalar; unknown (opaque) for a pointer parameter given some other type (KernelArgumentTraits),
/// whose range the library cannot see.
struct ArgumentRange {
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
  bool writes = false;
  bool opaque = false;
};

/// The ArgumentRange of `arg` given for `Param`.
template <class Param, class Arg>
ArgumentRange argument_range(const Arg& arg) {
  if constexpr (requires {
                  arg.address();
                  arg.size_bytes();
                }) {
    return {arg.address(), arg.size_bytes(), std::is_pointer_v<Param> && !std::is_const_v<std::remove_pointer_t<Param>>,
            false};
  } else {
    return {0, 0, false, std::is_pointer_v<Param>};
  }
}

/// Adds to `out` what arguments of `ranges` let the kernel or tile function `name` touch: a write for a writable
/// pointer, a read for a read-only one, and opaque for a pointer given something other than a span.
void add_argument_accesses(std::span<const ArgumentRange> ranges, std::string_view name, AccessSet& out);

/// How many blocks of `block_threads` threads (and `dynamic_shared` bytes) of `kernel` one multiprocessor holds at
/// once (Kernel::max_active_blocks_per_sm), after raising the kernel's dynamic shared memory limit to
/// `dynamic_shared` as a launch would. \throws CudaError naming the kernel when the driver refuses the shape.
int max_active_blocks_per_sm(KernelInfo& kernel, unsigned block_threads, unsigned dynamic_shared);

/// Raises the kernel's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to `needed` when it is below (never lowers it).
/// \throws CudaError naming the kernel when the driver refuses.
void raise_dynamic_shared_limit(KernelInfo& kernel, int needed);

/// Sets the kernel's CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT (Kernel::prefer_shared_carveout).
/// \throws UsageError for a percentage outside -1..100; CudaError naming the kernel when the driver refuses.
void set_shared_carveout(KernelInfo& kernel, int percent);

/// \throws UsageError when `config` is outside the kernel's or the device's limits, naming which.
void validate_launch(const KernelInfo& kernel, const LaunchConfig& config);
/// The driver's launch shape for `config`, after raising the kernel's dynamic shared memory limit when `config`
/// needs more (never lowering it, so concurrent launches from several threads and handles each find at least
/// what they need). Programmatic launch is dropped below sm_90, where it does not exist.
driver::LaunchShape prepare_launch(KernelInfo& kernel, const LaunchConfig& config);

/// Submits `kernel` with the argument values `params` through `ctx`: the one routine that turns checked
/// arguments into a launch, for Kernel::launch and LaunchOp alike.
template <class... Params>
void submit_launch(ExecContext& ctx, KernelInfo& kernel, const LaunchConfig& config, std::tuple<Params...> params,
                   std::size_t span_bytes = 0) {
  static constexpr std::array<std::size_t, sizeof...(Params)> sizes{sizeof(Params)...};
  const driver::LaunchShape shape = prepare_launch(kernel, config);
  // The driver copies the values when the launch is submitted or recorded (and a plan copies them too).
  std::apply(
      [&](Params&... values) {
        std::array<void*, sizeof...(Params) + 1> pointers{static_cast<void*>(&values)..., nullptr};
        ctx.launch({kernel.function, shape, pointers.data(), sizes.data(), sizeof...(Params), kernel.name, span_bytes});
      },
      params);
}

}  // namespace detail

}  // namespace lazygraph
