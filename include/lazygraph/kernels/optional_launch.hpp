#pragma once
/// \file
/// OptionalLaunch: a kernel launch that may not have been made, for the branch of a choose() that is not taken when
/// making it needs what is not there. A kernel launch, so it lives in the kernels layer beside LaunchOp. The nn
/// decoder picks its quantized or dense kernels per weight with choose(), so its op types stay the same whatever the
/// weights are; but a dense decoder has no quantized kernels to call (a GPU without tensor cores cannot even load
/// them) and a dense weight no QuantizedMatrix to pass, so the quantized side of such a choose() is an
/// OptionalLaunch that holds nothing.

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/kernels/launch_op.hpp"
#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/concepts.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {

/// A LaunchOp<Params...>, or nothing. Holding a launch, it is that launch (a GraphNode, built without capture, with
/// the launch's accesses), plus an owner it keeps alive as long as the work may run (a graph that records it keeps
/// it as long as it lives): for memory the launch reads through an argument that is not a span, such as a
/// QuantizedMatrix, which a LaunchOp cannot keep. Holding nothing, it reads and writes nothing and executing it is a
/// UsageError, which a choose() never does to the branch it did not take.
template <class... Params>
class [[nodiscard]] OptionalLaunch : public OpBase<OptionalLaunch<Params...>> {
 public:
  /// No output, as a launch.
  using Output = void;
  /// A GraphNode, as the launch it may hold.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext, as the launch it may hold.
  static constexpr bool builds_without_capture = true;

  /// Holds nothing.
  OptionalLaunch() = default;
  /// Holds `launch`, and `owner` (may be null) to keep alive with it.
  explicit OptionalLaunch(LaunchOp<Params...> launch, std::shared_ptr<const void> owner = nullptr)
      : launch_(std::move(launch)), owner_(std::move(owner)) {}

  /// Executes the launch, keeping the owner alive. \throws UsageError when it holds none (a choose() that took this
  /// branch by mistake).
  void execute(ExecContext& ctx) const {
    if (!launch_) {
      throw UsageError(
          "an OptionalLaunch holding no launch was executed: it stands for the branch of a choose() that is not "
          "taken, and must never be the one that runs");
    }
    if (owner_) ctx.keep_alive(owner_);
    launch_->execute(ctx);
  }
  /// The launch's accesses, or none.
  void accesses(AccessSet& out) const {
    if (launch_) launch_->accesses(out);
  }
  /// Whether it holds a launch.
  [[nodiscard]] bool has_value() const noexcept { return launch_.has_value(); }

 private:
  std::optional<LaunchOp<Params...>> launch_;
  std::shared_ptr<const void> owner_;
};

/// `make()` (which returns a LaunchOp) as an OptionalLaunch keeping `owner` alive when `made` is true; an empty one
/// of the same type, without calling `make`, when it is false: `make` may then use what is not there (a null kernels
/// pointer, a weight that is not quantized).
template <class Make>
[[nodiscard]] auto optional_launch(bool made, Make&& make, std::shared_ptr<const void> owner = nullptr) {
  using Result = decltype(OptionalLaunch(std::declval<std::invoke_result_t<Make&>>()));
  return made ? Result(make(), std::move(owner)) : Result();
}

}  // namespace lazygraph
