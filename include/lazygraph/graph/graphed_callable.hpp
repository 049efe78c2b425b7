#pragma once
/// \file
/// make_graphed: turns a function that submits GPU work into one that replays a graph of it — the first calls run
/// it eagerly (warm-up: kernels load, lazy initialisation happens), the next captures it, every later call replays
/// the capture (PyTorch's make_graphed_callables, ferrotorch's make_graphed_callable).
///
/// The function receives an ExecContext and executes lazygraph ops through it (`op.execute(ctx)`), or submits to
/// `ctx.stream()` itself: the same code runs eagerly and under capture. What it touches is captured by address:
/// to feed a replay new input, write it into the same buffers (`copy`, `CudaGraph::update`).

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/stream.hpp"
#include "lazygraph/graph/cuda_graph.hpp"
#include "lazygraph/ops/concepts.hpp"

namespace lazygraph {

/// How make_graphed warms up and captures.
struct GraphedOptions {
  /// Eager calls before the capture.
  std::size_t warmup = 2;
  /// How the capture treats unsafe calls (CaptureMode).
  CaptureMode mode = CaptureMode::this_thread;
  /// A pool for the graph (GraphOptions::pool), or none.
  std::optional<GraphPool> pool = std::nullopt;
};

namespace detail {
/// The function as a GraphNode op, so that it can be run eagerly (sync_on) and captured alike. It is one only by
/// the caller's word: a function that allocates or synchronizes breaks the capture, which then fails.
class CallableOp : public OpBase<CallableOp> {
 public:
  using Output = void;
  static constexpr bool is_graph_node = true;
  explicit CallableOp(const std::function<void(ExecContext&)>* fn) : fn_(fn) {}
  void execute(ExecContext& ctx) const { (*fn_)(ctx); }

 private:
  const std::function<void(ExecContext&)>* fn_;
};
}  // namespace detail

/// A function graphed on first use (see the file comment), made by make_graphed.
///
/// Calls: while warming up, a call runs the function on the stream and waits for it (eagerly, like sync_on); the
/// call after the warm-up captures it and replays the graph; later calls replay it (launch_on(stream): queued, not
/// waited for — call synchronize(), or read results with a stream-ordered copy). When the capture fails (the
/// function synchronized, allocated, threw), the error is passed on, the stream stays usable, and the next call
/// tries to capture again.
///
/// Thread safety: calls from several threads at once are serialised (a lock); the stream orders their work.
class GraphedCallable {
 public:
  /// Prefer make_graphed. \throws UsageError for an empty function.
  GraphedCallable(const Stream& stream, std::function<void(ExecContext&)> fn, GraphedOptions options)
      : stream_(&stream), state_(std::make_unique<State>(std::move(fn), std::move(options))) {
    if (!state_->fn) throw UsageError("make_graphed: no function");
  }

  /// Runs (warm-up), captures and replays, or replays (see the class comment).
  void operator()() {
    State& st = *state_;
    const std::lock_guard<std::mutex> lock(st.mutex);
    ++st.calls;
    if (st.graph) {
      st.graph->launch_on(*stream_);
      return;
    }
    if (st.eager_calls < st.options.warmup) {
      detail::CallableOp(&st.fn).sync_on(*stream_);
      ++st.eager_calls;
      return;
    }
    GraphOptions g;
    g.mode = st.options.mode;
    g.pool = st.options.pool;
    st.graph.emplace(CudaGraph<>::capture(*stream_, detail::CallableOp(&st.fn), g));
    st.graph->launch_on(*stream_);
  }

  /// Waits for the work of every call so far.
  void synchronize() const { stream_->synchronize(); }
  /// True once the function was captured (later calls replay).
  [[nodiscard]] bool captured() const {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->graph.has_value();
  }
  /// Calls so far (successful or not).
  [[nodiscard]] std::size_t calls() const {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->calls;
  }
  /// The graph (its replay_count, node_count, ...). \throws UsageError before the capture.
  [[nodiscard]] CudaGraph<>& graph() {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->graph) throw UsageError("GraphedCallable::graph: not captured yet (it is still warming up)");
    return *state_->graph;
  }

 private:
  struct State {
    State(std::function<void(ExecContext&)> f, GraphedOptions o) : fn(std::move(f)), options(std::move(o)) {}
    std::function<void(ExecContext&)> fn;  ///< its address is the op's: State stays put when the callable moves
    GraphedOptions options;
    std::optional<CudaGraph<>> graph;
    std::size_t eager_calls = 0;
    std::size_t calls = 0;
    mutable std::mutex mutex;
  };
  const Stream* stream_;  ///< the caller's: it must outlive the callable
  std::unique_ptr<State> state_;
};

/// `fn(ExecContext&)` graphed on `stream` (which must outlive the result): `options.warmup` eager calls, then a
/// capture, then replays. \throws UsageError for an empty function.
template <class F>
requires std::is_invocable_v<F&, ExecContext&>
[[nodiscard]] GraphedCallable make_graphed(const Stream& stream, F&& fn, GraphedOptions options = {}) {
  return GraphedCallable(stream, std::function<void(ExecContext&)>(std::forward<F>(fn)), std::move(options));
}

}  // namespace lazygraph
