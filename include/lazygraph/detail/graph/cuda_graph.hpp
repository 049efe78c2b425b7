#pragma once
/// \file
/// CudaGraph<T>: a captured, instantiated and uploaded CUDA graph, with the output of its capture (T).
///
/// Exception safety: if the callback or an op throws during capture, the capture is ended, the partial graph
/// destroyed, the stream left usable and the exception passed on; nothing is leaked.
///
/// Thread safety: `launch`, `launch_on` and `update` may be called on one graph from several threads at once,
/// each call atomic; a sequence of them (an update, then the launch that should see it) is not — hold your own
/// lock around it. Distinct graphs are independent. Capturing on several threads at once (each on its own
/// stream, in CaptureMode::this_thread) works.
///
/// Lifetime: the graph keeps every buffer its recorded ops touch, and every kernel module they launch, alive
/// until it is destroyed; destroying it waits for its replays (on any stream) to finish first.

#include <filesystem>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "lazygraph/detail/graph/graph_state.hpp"
#include "lazygraph/detail/graph/scope.hpp"
#include "lazygraph/detail/ops/concepts.hpp"

namespace lazygraph {

/// A captured, instantiated and uploaded CUDA graph, and the output of its capture (`T`; void for none). Made by
/// `scope` or `capture`; move-only: launching, updating or inspecting a moved-from graph throws UsageError.
/// Exception safety, threads and lifetimes: see the file comment.
template <class T = void>
class CudaGraph {
 public:
  /// What the capture returned (take_output), void for nothing.
  using Output = T;

  /// Captures what `callback(Scope&)` records on `stream`, then instantiates and uploads the graph. The
  /// callback's return value becomes the graph's output: `CudaGraph<R>`.
  template <class F>
  static auto scope(const Stream& stream, F&& callback, CaptureMode mode = CaptureMode::this_thread) {
    // READ THIS IF YOUR COMPILE BREAKS HERE: the callback receives the Scope by reference.
    constexpr bool callback_takes_scope_by_reference = std::is_invocable_v<F&, Scope&>;
    static_assert(callback_takes_scope_by_reference,
                  "CudaGraph::scope: the callback must be callable with `Scope&` — write [&](lazygraph::Scope& s) "
                  "{ ... }; a Scope cannot be copied or moved, so a callback taking it by value cannot be called");
    if constexpr (callback_takes_scope_by_reference) {
      return scope_impl(stream, std::forward<F>(callback), mode);
    } else {
      return CudaGraph<>(std::unique_ptr<detail::GraphState>{});  // never runs: keeps the error to one line
    }
  }

 private:
  template <class F>
  static auto scope_impl(const Stream& stream, F&& callback, CaptureMode mode) {
    using R = std::invoke_result_t<F&, Scope&>;
    detail::CaptureSession session(stream, mode);
    ExecContext ctx(stream, true);
    // The Scope lives on the heap and, once the capture succeeded, as long as the graph: a reference kept past
    // the callback by mistake then reports UsageError instead of touching a dead object.
    const std::shared_ptr<Scope> s(new Scope(ctx));
    std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> result;
    try {
      if constexpr (std::is_void_v<R>) {
        callback(*s);
        result.emplace(true);
      } else {
        result.emplace(callback(*s));
      }
    } catch (...) {
      s->close();
      session.abort();
      detail::retire_failed_scope(s);
      throw;
    }
    s->close();
    detail::driver::Graph graph;
    try {
      graph = session.finish();
    } catch (...) {
      detail::retire_failed_scope(s);
      throw;
    }
    auto state = std::make_unique<detail::GraphState>(stream.device(), std::move(graph), ctx.take_owners(), s);
    if constexpr (std::is_void_v<R>) {
      return CudaGraph<R>(std::move(state));
    } else {
      return CudaGraph<R>(std::move(state), std::move(*result));
    }
  }

 public:
  /// Captures one GraphNode op; its output is kept (`take_output()`).
  template <class Op>
  requires GraphNode<std::remove_cvref_t<Op>>
  static auto capture(const Stream& stream, Op&& op, CaptureMode mode = CaptureMode::this_thread) {
    return scope(
        stream, [&](Scope& s) { return s.record(std::forward<Op>(op)); }, mode);
  }

  /// Replays the graph on its own stream and waits for it.
  void launch() { state().launch_and_wait(); }
  /// Replays asynchronously on `stream` (after any `update` queued before).
  void launch_on(const Stream& stream) { state().launch_on(stream); }
  /// Runs `op` now, eagerly, on the graph's stream, so that it completes before the next replay: typically a
  /// copy into the graph's input buffer. Its buffers are kept alive until that replay finishes.
  ///
  /// Ordering: the op runs after every replay queued so far, on any stream (also `launch_on(other)`), and
  /// before every replay queued after it. Its buffers are released once its work has run, without waiting.
  template <class Op>
  requires DeviceOp<std::remove_cvref_t<Op>>
  void update(Op&& op) {
    state().update([&](ExecContext& ctx) { std::as_const(op).execute(ctx); });
  }

  /// The output of the capture (for T not void); once.
  T take_output() requires(!std::is_void_v<T>) {
    if (!output_) throw UsageError("CudaGraph::take_output: the output was already taken");
    T out = std::move(*output_);
    output_.reset();
    return out;
  }

  /// The number of nodes in the captured graph.
  [[nodiscard]] std::size_t node_count() const { return state().node_count(); }
  /// The kind of each node, in the order the driver lists them.
  [[nodiscard]] std::vector<NodeKind> node_kinds() const { return state().node_kinds(); }
  /// The graph's dependencies: full, and programmatic (from early launches).
  [[nodiscard]] EdgeCounts edge_counts() const { return state().edge_counts(); }
  /// Writes the graph in Graphviz DOT form (cuGraphDebugDotPrint).
  void write_dot(const std::filesystem::path& path) const { state().write_dot(path); }
  /// The stream replays run on.
  [[nodiscard]] const Stream& stream() const { return state().stream(); }

 private:
  template <class U>
  friend class CudaGraph;
  explicit CudaGraph(std::unique_ptr<detail::GraphState> state) : state_(std::move(state)) {}
  using Stored = std::conditional_t<std::is_void_v<T>, std::monostate, T>;
  CudaGraph(std::unique_ptr<detail::GraphState> state, Stored output)
      : state_(std::move(state)), output_(std::move(output)) {}

  detail::GraphState& state() const {
    if (!state_) throw UsageError("use of a moved-from CudaGraph");
    return *state_;
  }

  std::unique_ptr<detail::GraphState> state_;
  std::conditional_t<std::is_void_v<T>, std::monostate, std::optional<T>> output_;
};

}  // namespace lazygraph
