#pragma once
/// \file
/// LaunchOp: a kernel launch as a lazy value. Made by calling a `Kernel<void(Params...)>` handle.
///
/// A kernel launch is an op, so it lives in the kernels layer, above ops: ops know nothing of kernels.
/// Executing it (eagerly or while recording a graph) keeps alive, through the ExecContext, both the memory its
/// span arguments view and the kernel itself (its KernelInfo, which holds the loaded module): a graph replays
/// the kernel's code long after the library, the handle and this op may be gone.

#include <array>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

#include "lazygraph/detail/kernels/kernel_info.hpp"
#include "lazygraph/kernels/launch_config.hpp"
#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/concepts.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {

/// One kernel launch, made by calling a Kernel handle: a GraphNode (a kernel node when recorded). Its arguments
/// are checked and converted when it is made; the op holds them, the kernel, and the buffers its spans view.
template <class... Params>
class [[nodiscard]] LaunchOp : public OpBase<LaunchOp<Params...>> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: a launch neither allocates nor touches host memory.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext, so CudaGraph::build can add it as a kernel node.
  static constexpr bool builds_without_capture = true;

  /// The owners of the arguments' memory, one slot per parameter (null for scalars): no heap allocation.
  using Owners = std::array<std::shared_ptr<const void>, sizeof...(Params)>;

  /// The memory each argument lets the kernel touch, one slot per parameter.
  using Ranges = std::array<detail::ArgumentRange, sizeof...(Params)>;

  /// Made by `Kernel::operator()`, which checks the arguments and the configuration first. `ranges` (what each
  /// argument views) makes the access set; without it, the launch is opaque (may touch anything).
  LaunchOp(std::shared_ptr<detail::KernelInfo> kernel, const LaunchConfig& config, std::tuple<Params...> params,
           Owners owners, std::size_t span_bytes = 0, std::optional<Ranges> ranges = std::nullopt)
      : kernel_(std::move(kernel)),
        config_(config),
        params_(std::move(params)),
        owners_(std::move(owners)),
        span_bytes_(span_bytes),
        ranges_(ranges) {}

  /// Submits the launch through `ctx`. \throws CudaError when the launch fails.
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(kernel_);  // the module must stay loaded while a graph may replay this launch
    for (const auto& owner : owners_) ctx.keep_alive(owner);
    detail::submit_launch(ctx, *kernel_, config_, params_, span_bytes_);
  }

  /// What the kernel may touch: every span argument's range, a write for a `T*` parameter, a read for a `const T*`
  /// one (named by the kernel). Opaque when a pointer parameter was given something other than a span.
  void accesses(AccessSet& out) const {
    if (!ranges_) {
      out.opaque(kernel_->name);
      return;
    }
    detail::add_argument_accesses(*ranges_, kernel_->name, out);
  }

  /// The kernel's name.
  [[nodiscard]] const std::string& kernel_name() const noexcept { return kernel_->name; }
  /// The launch configuration.
  [[nodiscard]] const LaunchConfig& config() const noexcept { return config_; }
  /// The bytes of the memory its span arguments view.
  [[nodiscard]] std::size_t span_bytes() const noexcept { return span_bytes_; }

 private:
  std::shared_ptr<detail::KernelInfo> kernel_;
  LaunchConfig config_;
  std::tuple<Params...> params_;
  Owners owners_;
  std::size_t span_bytes_ = 0;
  std::optional<Ranges> ranges_;
};

}  // namespace lazygraph
