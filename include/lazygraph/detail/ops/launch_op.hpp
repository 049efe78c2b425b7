#pragma once
/// \file
/// LaunchOp: a kernel launch as a lazy value. Made by calling a `Kernel<void(Params...)>` handle.

#include <array>
#include <memory>
#include <tuple>
#include <utility>

#include "lazygraph/detail/kernels/kernel_info.hpp"
#include "lazygraph/detail/ops/concepts.hpp"

namespace lazygraph {

template <class... Params>
class LaunchOp : public OpBase<LaunchOp<Params...>> {
 public:
  using Output = void;
  static constexpr bool is_graph_node = true;

  /// The owners of the arguments' memory, one slot per parameter (null for scalars): no heap allocation.
  using Owners = std::array<std::shared_ptr<const void>, sizeof...(Params)>;

  LaunchOp(std::shared_ptr<detail::KernelInfo> kernel, const LaunchConfig& config, std::tuple<Params...> params,
           Owners owners)
      : kernel_(std::move(kernel)), config_(config), params_(std::move(params)), owners_(std::move(owners)) {}

  void execute(ExecContext& ctx) const {
    for (const auto& owner : owners_) ctx.keep_alive(owner);
    launch(ctx.stream().get(), std::index_sequence_for<Params...>{});
  }

  [[nodiscard]] const std::string& kernel_name() const noexcept { return kernel_->name; }
  [[nodiscard]] const LaunchConfig& config() const noexcept { return config_; }

 private:
  template <std::size_t... I>
  void launch(CUstream stream, std::index_sequence<I...> /*unused*/) const {
    // The driver copies the argument values when the launch is submitted or recorded.
    std::tuple<Params...> values = params_;
    std::array<void*, sizeof...(Params) + 1> pointers{static_cast<void*>(&std::get<I>(values))..., nullptr};
    detail::launch_kernel(*kernel_, config_, stream, pointers.data());
  }

  std::shared_ptr<detail::KernelInfo> kernel_;
  LaunchConfig config_;
  std::tuple<Params...> params_;
  Owners owners_;
};

}  // namespace lazygraph
