#pragma once
/// \file
/// named(label, op): a part of the work with a name. Executing it opens an NVTX range of that name (so Nsight Systems
/// shows the model's blocks around their kernels, when eager and when captured) and labels the kernels it launches for
/// the profiler (ops/profile.hpp). In a graph it adds no node: the same nodes as `op`.

#include <string>
#include <utility>

#include "lazygraph/ops/combinators.hpp"
#include "lazygraph/ops/concepts.hpp"

namespace lazygraph {

/// `op` with a name (see the file comment). A GraphNode, buildable and so on exactly when `op` is.
template <DeviceOp Op>
class [[nodiscard]] NamedOp : public OpBase<NamedOp<Op>>, public detail::CompositeTraits<Op> {
 public:
  /// Op's output.
  using Output = typename Op::Output;

  /// Made by named().
  NamedOp(std::string label, Op op) : label_(std::move(label)), op_(std::move(op)) {}
  /// Executes `op` inside the label (closed again if it throws).
  Output execute(ExecContext& ctx) const {
    ctx.push_label(label_);
    struct Pop {
      explicit Pop(ExecContext& c) noexcept : ctx(c) {}
      Pop(const Pop&) = delete;
      Pop& operator=(const Pop&) = delete;
      ~Pop() { ctx.pop_label(); }
      ExecContext& ctx;
    } pop(ctx);
    return op_.execute(ctx);
  }
  /// What `op` reads and writes.
  void accesses(AccessSet& out) const { collect_accesses(op_, out); }
  /// The name.
  [[nodiscard]] const std::string& label() const noexcept { return label_; }

 private:
  std::string label_;
  Op op_;
};

/// `op` named `label` for NVTX and the profiler.
template <class Op>
requires DeviceOp<std::remove_cvref_t<Op>>
[[nodiscard]] NamedOp<std::remove_cvref_t<Op>> named(std::string label, Op&& op) {
  return {std::move(label), std::forward<Op>(op)};
}

}  // namespace lazygraph
