#pragma once
/// \file
/// host_call(name, f): a host function as an op, run on a driver thread when the stream (or a replay of the
/// graph) reaches it — for logging, counters, handing results to the host without a sync.
///
/// It touches host state on every replay, so it is not a GraphNode by itself: a graph takes it only through the
/// loudly named opt-in `allow_in_graph(host_call(...))`. `f` must not call CUDA (the driver forbids it in host
/// functions) and should be quick: the stream waits for it. An exception `f` throws is kept and thrown as
/// HostCallError, naming the call, by the graph's next launch or synchronize (by sync_on when run eagerly); the
/// graph stays usable.

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "lazygraph/ops/concepts.hpp"

namespace lazygraph {

namespace detail {

/// What a host node's user data points at: the function and where its exceptions go. Kept alive by whoever
/// keeps the node (a graph's owners; an eager run's ExecContext until it completes).
struct HostCallNode {
  std::shared_ptr<const std::function<void()>> function;
  std::shared_ptr<HostCallErrors> errors;
  std::string name;

  static void CUDA_CB run(void* data) noexcept {
    auto* self = static_cast<HostCallNode*>(data);
    try {
      (*self->function)();
    } catch (...) {
      self->errors->report(self->name, std::current_exception());
    }
  }
};

}  // namespace detail

/// Runs a host function when the stream gets there (see the file comment). Not a GraphNode; wrap it in
/// allow_in_graph to record it.
class [[nodiscard]] HostCallOp : public OpBase<HostCallOp> {
 public:
  /// No output.
  using Output = void;
  /// Runs host code: a GraphNode only through allow_in_graph.
  static constexpr bool runs_host_code = true;
  /// Submits through the ExecContext (a host node when built).
  static constexpr bool builds_without_capture = true;

  /// Made by host_call.
  HostCallOp(std::string name, std::function<void()> f)
      : name_(std::move(name)), function_(std::make_shared<const std::function<void()>>(std::move(f))) {}

  /// Submits the call. Each execution makes its own node record (so one op may go into several graphs, each
  /// reporting exceptions to its own launches); the context keeps it alive.
  void execute(ExecContext& ctx) const {
    auto node = std::make_shared<detail::HostCallNode>(detail::HostCallNode{function_, ctx.host_errors(), name_});
    ctx.keep_alive(node);
    ctx.host_function(&detail::HostCallNode::run, node.get(), node->name);
  }

  /// The name errors give.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const std::function<void()>> function_;
};

/// `f()` on a driver thread when the stream reaches this op. `name` labels it in errors.
template <class F>
requires std::is_invocable_v<F&>
[[nodiscard]] HostCallOp host_call(std::string name, F&& f) {
  return HostCallOp(std::move(name), std::function<void()>(std::forward<F>(f)));
}

/// A host_call made recordable: the explicit opt-in for running host code on every replay of a graph.
class [[nodiscard]] HostCallInGraphOp : public OpBase<HostCallInGraphOp> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode, by the user's explicit choice.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext.
  static constexpr bool builds_without_capture = true;

  /// Made by allow_in_graph.
  explicit HostCallInGraphOp(HostCallOp op) : op_(std::move(op)) {}
  /// Executes the host call.
  void execute(ExecContext& ctx) const { op_.execute(ctx); }

 private:
  HostCallOp op_;
};

/// Lets a graph record `op` although it runs host code on every replay. Only host calls take this opt-in.
[[nodiscard]] inline HostCallInGraphOp allow_in_graph(HostCallOp op) { return HostCallInGraphOp(std::move(op)); }

}  // namespace lazygraph
