#pragma once
/// \file
/// child_graph(g): a CudaGraph embedded in another graph as one node. The parent copies g's nodes as they
/// are when the parent is recorded (later updates of g do not reach it) and keeps what they use alive.
/// Run eagerly, the op replays g on the stream.

#include <memory>
#include <utility>

#include "lazygraph/detail/graph/graph_recording.hpp"
#include "lazygraph/graph/cuda_graph.hpp"

namespace lazygraph {

/// One graph as a node of another: a GraphNode. Made by child_graph.
class [[nodiscard]] ChildGraphOp : public OpBase<ChildGraphOp> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: the child's nodes are GraphNodes (host calls in it were opted in when it was recorded).
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext.
  static constexpr bool builds_without_capture = true;

  /// Made by child_graph.
  explicit ChildGraphOp(std::shared_ptr<detail::GraphState> graph) : graph_(std::move(graph)) {}

  /// Recording: adds the child node and keeps the child's owners (as of now) alive. Eagerly: replays the graph
  /// on the stream, ordered like CudaGraph::launch_on.
  void execute(ExecContext& ctx) const {
    ctx.host_errors()->watch(graph_->host_errors());  // its host calls' exceptions reach this run too
    if (!ctx.recording()) {
      graph_->launch_on(ctx.stream());
      return;
    }
    if (graph_->scratch_bytes() > 0) {
      throw UsageError(
          "child_graph: this graph has scratch memory (Scope::scratch), and CUDA embeds no graph with memory nodes "
          "as a child; record its ops into the parent's scope instead, or launch it on its own");
    }
    ctx.keep_alive(graph_->owners());
    detail::GraphRecording::of(ctx, "child_graph is a node of a graph").child_graph(graph_->template_graph());
  }

 private:
  std::shared_ptr<detail::GraphState> graph_;
};

/// `graph` as one node of the graph this op is recorded into. \throws UsageError for a moved-from graph.
template <class T>
[[nodiscard]] ChildGraphOp child_graph(const CudaGraph<T>& graph) {
  return ChildGraphOp(graph.shared_state());
}

}  // namespace lazygraph
