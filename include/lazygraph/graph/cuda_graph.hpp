#pragma once
/// \file
/// CudaGraph<T>: a recorded, instantiated and uploaded CUDA graph, with the output of its recording (T).
///
/// Two ways to record: `scope`/`capture` capture a stream; `build` adds the same nodes directly (no stream
/// involved, and every node known). `update_from(op)` re-parameterises the instantiated graph in place;
/// `set(scalar, v)` changes a DeviceScalar its kernels read.
///
/// Exception safety: if the callback or an op throws during capture, the capture is ended, the partial graph
/// destroyed, the stream left usable and the exception passed on; nothing is leaked.
///
/// Thread safety: `launch`, `launch_on`, `update`, `set`, `update_from`, `synchronize` and the accessors may be
/// called on one graph from several threads at once, each call atomic; a sequence of them (an update, then the
/// launch that should see it) is not — hold your own lock around it. Distinct graphs are independent. Capturing on
/// several threads at once (each on its own stream, in CaptureMode::this_thread) works.
///
/// Lifetime: the graph keeps every buffer its recorded ops touch, and every kernel module they launch, alive
/// until it is destroyed — or, after `update_from`, until no queued replay can use them any more; destroying it
/// waits for its replays (on any stream) to finish first.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "lazygraph/detail/graph/graph_build.hpp"
#include "lazygraph/detail/graph/graph_state.hpp"
#include "lazygraph/graph/device_scalar.hpp"
#include "lazygraph/graph/graph_options.hpp"
#include "lazygraph/graph/node_kind.hpp"
#include "lazygraph/graph/scope.hpp"
#include "lazygraph/ops/concepts.hpp"

namespace lazygraph {

/// A recorded (captured or built), instantiated and uploaded CUDA graph, and the output of its recording (`T`;
/// void for none). Made by `scope`, `capture` or `build`; move-only: launching, updating or inspecting a
/// moved-from graph throws UsageError. Exception safety, threads and lifetimes: see the file comment.
template <class T = void>
class CudaGraph {
 public:
  /// What the recording returned (take_output), void for nothing.
  using Output = T;

  /// Captures what `callback(Scope&)` records on `stream`, then instantiates and uploads the graph. The
  /// callback's return value becomes the graph's output: `CudaGraph<R>`.
  template <class F>
  static auto scope(const Stream& stream, F&& callback, CaptureMode mode = CaptureMode::this_thread) {
    GraphOptions options;
    options.mode = mode;
    return scope(stream, std::forward<F>(callback), options);
  }

  /// As scope(stream, callback, mode), with instantiation options.
  template <class F>
  static auto scope(const Stream& stream, F&& callback, const GraphOptions& options) {
    // READ THIS IF YOUR COMPILE BREAKS HERE: the callback receives the Scope by reference.
    constexpr bool callback_takes_scope_by_reference = std::is_invocable_v<F&, Scope&>;
    static_assert(callback_takes_scope_by_reference,
                  "CudaGraph::scope: the callback must be callable with `Scope&`: write [&](lazygraph::Scope& s) "
                  "{ ... }; a Scope cannot be copied or moved, so a callback taking it by value cannot be called");
    if constexpr (callback_takes_scope_by_reference) {
      return record_impl(stream, std::forward<F>(callback), options, false);
    } else {
      return CudaGraph<>(nullptr);  // never runs: keeps the error to one line
    }
  }

  /// Captures one GraphNode op; its output is kept (`take_output()`).
  template <class Op>
  requires GraphNode<std::remove_cvref_t<Op>>
  static auto capture(const Stream& stream, Op&& op, CaptureMode mode = CaptureMode::this_thread) {
    GraphOptions options;
    options.mode = mode;
    return capture(stream, std::forward<Op>(op), options);
  }
  /// As capture(stream, op, mode), with instantiation options.
  template <class Op>
  requires GraphNode<std::remove_cvref_t<Op>>
  static auto capture(const Stream& stream, Op&& op, const GraphOptions& options) {
    return scope(
        stream, [&](Scope& s) { return s.record(std::forward<Op>(op)); }, options);
  }

  /// Builds the graph of `op` without capturing a stream: every launch, copy, fill, host call, child graph and
  /// event op becomes a node added directly, `>>` an edge and `all` parallel branches — the same nodes and
  /// dependencies that capture makes, faster, and with every node known, so that `update_from` can update them
  /// one by one. The graph replays on a stream of its own on `device`. Its output is the op's.
  template <class Op>
  requires GraphNode<std::remove_cvref_t<Op>>
  static auto build(const Device& device, Op&& op, const GraphOptions& options = {}) {
    using O = std::remove_cvref_t<Op>;
    // READ THIS IF YOUR COMPILE BREAKS HERE: build adds nodes itself, so every op must submit through the
    // ExecContext.
    static_assert(is_buildable_v<O>,
                  "CudaGraph::build: this op (or a part of it) submits work to the stream itself, which only capture "
                  "can record; use CudaGraph::capture, or make the op submit through ExecContext (launch, copy, "
                  "fill) and say `static constexpr bool builds_without_capture = true;`");
    const Stream stream = Stream::pooled(device);
    return record_impl(
        stream, [&](Scope& s) { return s.record(std::forward<Op>(op)); }, options, true);
  }

  /// Builds the graph of what `callback(Scope&)` records, without capturing (see build(device, op)). Scope::record
  /// throws UsageError for an op that is not a BuildableNode.
  template <class F>
  requires std::is_invocable_v<F&, Scope&>
  static auto build(const Device& device, F&& callback, const GraphOptions& options = {}) {
    const Stream stream = Stream::pooled(device);
    return record_impl(stream, std::forward<F>(callback), options, true);
  }

 private:
  template <class F>
  static auto record_impl(const Stream& stream, F&& callback, const GraphOptions& options, bool build) {
    using R = std::invoke_result_t<F&, Scope&>;
    if (options.pool && options.pool->device().ordinal() != stream.device().ordinal()) {
      throw UsageError("CudaGraph: GraphOptions::pool is a pool of device " +
                       std::to_string(options.pool->device().ordinal()) + "; the graph is recorded on device " +
                       std::to_string(stream.device().ordinal()));
    }
    detail::Recorded recorded;
    auto host_errors = std::make_shared<HostCallErrors>();
    std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> result;
    if (build) {
      recorded.plan.emplace();
      // Made first: conditions (Scope::condition) belong to it.
      detail::driver::Graph graph = detail::driver::Graph::create();
      ExecContext ctx(stream, *recorded.plan, host_errors);
      detail::GraphRecording recording(ctx);
      recording.make_conditions_in(graph.native_handle());
      result = run_callback(ctx, recording, callback, recorded.scope, nullptr);
      detail::materialize_into(graph.native_handle(), *recorded.plan, recorded.nodes);
      recorded.graph = std::move(graph);
      recorded.bytes_to_device = recording.bytes_to_device();
      recorded.bytes_to_host = recording.bytes_to_host();
      recorded.scratch_tag = recording.scratch_tag();
      recorded.scratch_bytes = recording.scratch_bytes();
      recorded.owners = ctx.take_owners();
    } else {
      detail::CaptureSession session(stream, options.mode);
      ExecContext ctx(stream, true, host_errors);
      detail::GraphRecording recording(ctx);
      result = run_callback(ctx, recording, callback, recorded.scope, &session);
      try {
        recorded.graph = session.finish();
      } catch (...) {
        detail::retire_failed_scope(recorded.scope);
        throw;
      }
      recorded.captured_conditions = recording.conditions_made() > 0;
      recorded.captured_scratch = recording.scratch_bytes() > 0;
      recorded.scratch_tag = recording.scratch_tag();
      recorded.scratch_bytes = recording.scratch_bytes();
      recorded.bytes_to_device = recording.bytes_to_device();
      recorded.bytes_to_host = recording.bytes_to_host();
      recorded.owners = ctx.take_owners();
    }
    auto replay_stream =
        options.pool ? options.pool->state()->stream : std::make_shared<Stream>(Stream::pooled(stream.device()));
    auto state = std::make_shared<detail::GraphState>(std::move(replay_stream), std::move(recorded), options,
                                                      std::move(host_errors));
    if constexpr (std::is_void_v<R>) {
      return CudaGraph<R>(std::move(state));
    } else {
      return CudaGraph<R>(std::move(state), std::move(*result));
    }
  }

  /// Runs the callback with a Scope on the heap that, once recording succeeded, lives as long as the graph: a
  /// reference kept past the callback by mistake then reports UsageError instead of touching a dead object.
  template <class F>
  static auto run_callback(ExecContext& ctx, detail::GraphRecording& recording, F& callback,
                           std::shared_ptr<const void>& scope_out, detail::CaptureSession* session) {
    using R = std::invoke_result_t<F&, Scope&>;
    const std::shared_ptr<Scope> s(new Scope(ctx));
    std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> result;
    try {
      if constexpr (std::is_void_v<R>) {
        callback(*s);
        result.emplace(true);
      } else {
        result.emplace(callback(*s));
      }
      recording.check_conditions_consumed();
      recording.finish_scratch();  // captured scratch memory is freed after everything recorded
    } catch (...) {
      s->close();
      if (session != nullptr) session->abort();
      detail::retire_failed_scope(s);
      throw;
    }
    s->close();
    scope_out = s;
    return result;
  }

 public:
  /// Replays the graph on its own stream and waits for it.
  /// \throws HostCallError when a host_call in this graph threw (during this replay or an earlier one).
  void launch() { state().launch_and_wait(); }
  /// Replays asynchronously on `stream` (after any `update` queued before).
  /// \throws HostCallError when a host_call of an earlier replay threw; this replay is then not launched.
  void launch_on(const Stream& stream) { state().launch_on(stream); }
  /// Waits for every replay queued so far, on any stream. \throws HostCallError as launch().
  void synchronize() { state().synchronize(); }

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

  /// Sets a DeviceScalar that the graph's kernels read, before the next replay (ordered like `update`).
  template <class U>
  void set(const DeviceScalar<U>& scalar, std::type_identity_t<U> value) {
    update(scalar.assign(value));
  }

  /// Re-parameterises the graph in place from `op`, which records the same nodes with other arguments (other
  /// buffers, other scalars, another grid): the next replay runs `op`. A built graph updates only the nodes whose
  /// parameters changed; a captured one captures `op` and applies cuGraphExecUpdate. Replays already queued
  /// keep the old arguments, and the old op's buffers are released once they have run.
  ///
  /// Returns what happened: when `op` does not fit (another node count, kind, dependency or kernel), the graph
  /// is left exactly as it was and the result says why and at which node — unless `options` asks to
  /// re-instantiate instead. The op's output is dropped. \throws CudaError when recording `op` fails.
  ///
  /// Conditions (Scope::condition): a built graph keeps its own — the op recorded again uses the graph's (the k-th
  /// condition made is the graph's k-th), so that kernels and conditional bodies update like any node. To
  /// re-instantiate a built graph with conditions, the op is recorded a second time, for the new graph's new
  /// conditions (a callback that makes them; an op that carries the old ones cannot be). A captured graph with
  /// conditions is never updated in place (not_supported), only re-instantiated when asked.
  template <class Op>
  requires GraphNode<std::remove_cvref_t<Op>>
  [[nodiscard]] UpdateResult update_from(Op&& op, const UpdateOptions& options = {}) {
    detail::GraphState& g = state();
    if constexpr (!is_buildable_v<std::remove_cvref_t<Op>>) {
      if (g.built()) throw_not_buildable();
    }
    return g.update_from([&](ExecContext& ctx) { (void)std::as_const(op).execute(ctx); }, options);
  }
  /// As update_from(op), from what `callback(Scope&)` records.
  template <class F>
  requires std::is_invocable_v<F&, Scope&>
  [[nodiscard]] UpdateResult update_from(F&& callback, const UpdateOptions& options = {}) {
    return state().update_from(
        [&](ExecContext& ctx) {
          std::shared_ptr<const void> kept;
          (void)run_callback(ctx, detail::GraphRecording::of(ctx, "CudaGraph::update_from"), callback, kept, nullptr);
          detail::retire_failed_scope(std::move(kept));
        },
        options);
  }

  /// Uploads the graph to the device on `stream` now (GraphOptions::upload does it when instantiating).
  void upload(const Stream& stream) { state().upload(stream); }
  /// True once the graph was uploaded (by instantiation or `upload`).
  [[nodiscard]] bool uploaded() const { return state().uploaded(); }

  /// The output of the recording (for T not void); once.
  T take_output() requires(!std::is_void_v<T>) {
    (void)state();  // a moved-from graph's optional is still engaged
    if (!output_) throw UsageError("CudaGraph::take_output: the output was already taken");
    T out = std::move(*output_);
    output_.reset();
    return out;
  }

  /// True for a graph made by `build` (nodes added directly), false for a captured one.
  [[nodiscard]] bool built() const { return state().built(); }
  /// How many replays were launched (launch and launch_on) since the graph was made.
  [[nodiscard]] std::uint64_t replay_count() const { return state().replay_count(); }
  /// The bytes its staging copies (copy with a StagingBuffer's span) move per replay each way, and the replays.
  [[nodiscard]] TransferStats transfers() const { return state().transfers(); }
  /// The bytes of scratch memory (Scope::scratch) the graph allocates while it runs.
  [[nodiscard]] std::size_t scratch_bytes() const { return state().scratch_bytes(); }
  /// How many owners (buffers, kernel modules, child graphs) the graph keeps alive for its nodes.
  [[nodiscard]] std::size_t owner_count() const { return state().owner_count(); }
  /// The number of nodes in the graph.
  [[nodiscard]] std::size_t node_count() const { return state().node_count(); }
  /// The kind of each node, in the order the driver lists them.
  [[nodiscard]] std::vector<NodeKind> node_kinds() const { return state().node_kinds(); }
  /// For each node (in node_kinds() order), the indices of the nodes it depends on, ascending.
  [[nodiscard]] std::vector<std::vector<std::size_t>> dependencies() const { return state().dependencies(); }
  /// The graph's dependencies: full, and programmatic (from early launches).
  [[nodiscard]] EdgeCounts edge_counts() const { return state().edge_counts(); }
  /// Writes the graph in Graphviz DOT form (cuGraphDebugDotPrint).
  void write_dot(const std::filesystem::path& path) const { state().write_dot(path); }
  /// The stream replays run on.
  [[nodiscard]] const Stream& stream() const { return state().stream(); }
  /// The executable graph, for driver calls lazygraph does not make. Unchecked: what you do with it is yours
  /// (destroying it, or launching it while lazygraph updates it, breaks the graph).
  [[nodiscard]] CUgraphExec native_handle() const { return state().native_exec(); }

  /// The shared state, for ops that embed this graph (child_graph).
  [[nodiscard]] const std::shared_ptr<detail::GraphState>& shared_state() const {
    (void)state();
    return state_;
  }

 private:
  template <class U>
  friend class CudaGraph;
  explicit CudaGraph(std::shared_ptr<detail::GraphState> state) : state_(std::move(state)) {}

 public:
  /// Move-only: one graph, one owner.
  CudaGraph(CudaGraph&&) noexcept = default;
  /// Move-only: one graph, one owner.
  CudaGraph& operator=(CudaGraph&&) noexcept = default;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph() = default;

 private:
  using Stored = std::conditional_t<std::is_void_v<T>, std::monostate, T>;
  CudaGraph(std::shared_ptr<detail::GraphState> state, Stored output)
      : state_(std::move(state)), output_(std::move(output)) {}

  [[noreturn]] static void throw_not_buildable() {
    throw UsageError(
        "CudaGraph::update_from: this graph was built, and the op submits work to the stream itself, which only "
        "capture can record; update it from an op made of BuildableNodes");
  }

  detail::GraphState& state() const {
    if (!state_) throw UsageError("use of a moved-from CudaGraph");
    return *state_;
  }

  std::shared_ptr<detail::GraphState> state_;
  std::conditional_t<std::is_void_v<T>, std::monostate, std::optional<T>> output_;
};

}  // namespace lazygraph
