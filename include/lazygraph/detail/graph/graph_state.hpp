#pragma once
/// \file
/// The untyped core of CudaGraph: the capture session, and the recorded (captured or built), instantiated graph
/// with the owners of every buffer (and kernel module) its nodes use.

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lazygraph/detail/driver/deferred_release.hpp"
#include "lazygraph/detail/driver/graph_handle.hpp"
#include "lazygraph/detail/graph/graph_build.hpp"
#include "lazygraph/detail/graph/graph_recording.hpp"
#include "lazygraph/detail/ops/node_plan.hpp"
#include "lazygraph/driver/stream.hpp"
#include "lazygraph/graph/graph_options.hpp"
#include "lazygraph/graph/node_kind.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {
namespace detail {

/// Begins capturing on construction; `finish` returns the graph, `abort` (or the destructor) ends the capture
/// and destroys whatever was captured, leaving the stream usable. It remembers the raw stream, not the Stream
/// object, so a callback that moves the Stream elsewhere does not break it; one that destroys the Stream ends
/// the capture (finish then throws CaptureError).
class CaptureSession {
 public:
  CaptureSession(const Stream& stream, CaptureMode mode);
  ~CaptureSession();
  CaptureSession(const CaptureSession&) = delete;
  CaptureSession& operator=(const CaptureSession&) = delete;

  /// \throws CaptureError when the capture was invalidated by an illegal call during it, or its stream was
  ///         destroyed.
  driver::Graph finish();
  void abort() noexcept;

 private:
  CUstream stream_;
  bool active_ = false;
};

/// Keeps a Scope whose capture failed alive a while (the last few per thread), so that a reference to it kept
/// by mistake reports UsageError instead of reading freed memory.
void retire_failed_scope(std::shared_ptr<const void> scope) noexcept;

/// What recording an op produced: the graph, and for a built graph the plan and its node handles.
struct Recorded {
  driver::Graph graph;
  std::optional<NodePlan> plan;    ///< set for built graphs (CudaGraph::build)
  std::vector<CUgraphNode> nodes;  ///< built graphs: the node of each plan entry
  std::vector<std::shared_ptr<const void>> owners;
  std::shared_ptr<const void> scope;        ///< the Scope it was recorded through, if any
  bool captured_conditions = false;         ///< a captured graph with conditions (which cuGraphExecUpdate cannot move)
  bool captured_scratch = false;            ///< a captured graph with scratch memory (the same)
  std::shared_ptr<const void> scratch_tag;  ///< identifies its scratch memory (ExecContext::scratch_tag)
  std::size_t scratch_bytes = 0;            ///< of its scratch memory
  std::size_t bytes_to_device = 0;          ///< per replay, by its staging copies
  std::size_t bytes_to_host = 0;            ///< per replay, by its staging copies
};

/// A recorded graph, instantiated (and by default uploaded), with its own stream for replays.
///
/// Thread safety: launch_on, launch_and_wait, update, update_from and the accessors may be called from several
/// threads at once; each is atomic with respect to the others (a mutex guards the bookkeeping; the waits of
/// launch_and_wait and synchronize happen outside it).
class GraphState {
 public:
  using Owners = std::vector<std::shared_ptr<const void>>;

  /// Replays on `stream`: the graph's own, or its pool's (GraphOptions::pool), which the graph keeps alive.
  GraphState(std::shared_ptr<Stream> stream, Recorded recorded, const GraphOptions& options,
             std::shared_ptr<HostCallErrors> host_errors);
  ~GraphState();
  GraphState(const GraphState&) = delete;
  GraphState& operator=(const GraphState&) = delete;

  void launch_on(const Stream& stream);
  void launch_and_wait();
  /// Waits for every replay queued so far, on any stream. \throws HostCallError as launch_and_wait.
  void synchronize();
  void upload(const Stream& stream);

  /// Runs `submit(ExecContext&)` on the graph's stream, ordered after every replay queued so far (on any
  /// stream) and before the next; the owners it records are kept until that work completes.
  template <class F>
  void update(F&& submit) {
    const auto lock = guard();
    order_after_replays_elsewhere();
    ExecContext ctx(stream_, false, host_errors_);
    try {
      const Recording recording_thread(*this);
      submit(ctx);
    } catch (...) {
      hold_no_throw(ctx.take_owners());  // part of the op may have been submitted
      throw;
    }
    held_.hold(stream_, ctx.take_owners());
    updates_pending_ = true;
    held_.collect();
  }

  /// Records what `record(ExecContext&)` submits the way this graph was made (planned for a built graph,
  /// captured otherwise) and puts it in place of the graph's nodes' parameters; see CudaGraph::update_from.
  template <class F>
  UpdateResult update_from(F&& record, const UpdateOptions& options) {
    const auto lock = guard();
    if (built()) {
      NodePlan plan;
      plan.reserve_like(*plan_);
      ExecContext ctx(stream_, plan, host_errors_);
      GraphRecording recording(ctx);
      recording.reuse_conditions(plan_->conditions);
      recording.reuse_scratch(plan_->scratch, scratch_tag_);
      {
        const Recording recording_thread(*this);
        record(ctx);
      }
      // An op recorded before (no Scope) makes no conditions: it uses the graph's, whose handles it carries.
      if (plan.conditions.empty()) plan.conditions = plan_->conditions;
      if (plan.scratch.empty()) plan.scratch = plan_->scratch;  // the same: it uses the graph's scratch memory
      if (options.reinstantiate_on_mismatch && (!plan.conditions.empty() || !plan.scratch.empty())) {
        if (std::optional<UpdateResult> why = plan_mismatch(*plan_, plan)) {
          // Conditions and scratch memory belong to the graph they were made for: a new graph needs new ones, and
          // kernels that take them new arguments, so the op is recorded again for it.
          driver::Graph graph = driver::Graph::create();
          NodePlan fresh;
          ExecContext again(stream_, fresh, host_errors_);
          GraphRecording again_recording(again);
          again_recording.make_conditions_in(graph.native_handle());
          {
            const Recording recording_thread(*this);
            record(again);
          }
          again_recording.check_conditions_consumed();
          if (!conditions_made_for(fresh)) {
            why->message +=
                "; the op's conditional nodes use conditions of this graph, which a new graph cannot: to "
                "re-instantiate, update from a callback that makes them with Scope::condition";
            return std::move(*why);
          }
          if (!plan_->scratch.empty() && fresh.scratch.empty()) {
            why->message +=
                "; the op uses scratch memory of this graph, which a new graph cannot: to re-instantiate, update "
                "from a callback that asks for it with Scope::scratch";
            return std::move(*why);
          }
          check_scratch_fits(again_recording.scratch_bytes());
          scratch_tag_ = again_recording.scratch_tag();
          set_scratch_bytes(again_recording.scratch_bytes());
          set_transfers(again_recording);
          return reinstantiate_built(std::move(graph), std::move(fresh), again.take_owners(), std::move(*why));
        }
      }
      UpdateResult r = replace_plan(std::move(plan), ctx.take_owners(), options);
      if (r.ok()) set_transfers(recording);
      return r;
    }
    if (captured_scratch_ && !options.reinstantiate_on_mismatch) {
      return UpdateResult{UpdateStatus::not_supported, std::nullopt,
                          "a captured graph with scratch memory cannot be updated in place (a new capture allocates "
                          "at other addresses): make it with CudaGraph::build, or ask for reinstantiate_on_mismatch"};
    }
    if (captured_conditions_ && !options.reinstantiate_on_mismatch) {
      // Its conditions belong to the captured graph: a new capture has other ones, which the executable graph
      // cannot take in place.
      return UpdateResult{UpdateStatus::not_supported, std::nullopt,
                          "a captured graph with conditions cannot be updated in place (its conditions belong to "
                          "it): make it with CudaGraph::build, or ask for reinstantiate_on_mismatch"};
    }
    const Stream capture_stream = Stream::pooled(stream_.device());
    CaptureSession session(capture_stream, options_.mode);
    ExecContext ctx(capture_stream, true, host_errors_);
    GraphRecording recording(ctx);
    {
      const Recording recording_thread(*this);
      record(ctx);
      recording.finish_scratch();
    }
    driver::Graph graph = session.finish();
    const std::string no_update = "a captured graph with conditions or scratch memory cannot be updated in place";
    const bool bound = recording.conditions_made() > 0 || recording.scratch_bytes() > 0;
    if (bound && !options.reinstantiate_on_mismatch) {
      return UpdateResult{UpdateStatus::not_supported, std::nullopt, no_update};
    }
    check_scratch_fits(recording.scratch_bytes());
    UpdateResult r =
        captured_conditions_ || captured_scratch_ || bound
            ? reinstantiate(std::move(graph), ctx.take_owners(), {UpdateStatus::not_supported, std::nullopt, no_update})
            : replace_graph(std::move(graph), ctx.take_owners(), options);
    if (r.ok()) {
      captured_conditions_ = recording.conditions_made() > 0;
      captured_scratch_ = recording.scratch_bytes() > 0;
      scratch_tag_ = recording.scratch_tag();
      set_scratch_bytes(recording.scratch_bytes());
      set_transfers(recording);
    }
    return r;
  }

  [[nodiscard]] const Stream& stream() const noexcept { return stream_; }
  [[nodiscard]] bool built() const noexcept { return plan_.has_value(); }
  /// The bytes of scratch memory (Scope::scratch) the graph replayed now has.
  [[nodiscard]] std::size_t scratch_bytes() const;
  [[nodiscard]] std::size_t node_count() const;
  [[nodiscard]] std::vector<NodeKind> node_kinds() const;
  [[nodiscard]] EdgeCounts edge_counts() const;
  [[nodiscard]] std::vector<std::vector<std::size_t>> dependencies() const;
  void write_dot(const std::filesystem::path& path) const;
  [[nodiscard]] std::uint64_t replay_count() const;
  [[nodiscard]] TransferStats transfers() const;
  [[nodiscard]] std::size_t owner_count() const;
  [[nodiscard]] bool uploaded() const;
  /// The template graph (for embedding it as a child) and, to keep alive with it, its owners as of now.
  [[nodiscard]] CUgraph template_graph() const;
  [[nodiscard]] std::shared_ptr<const Owners> owners() const;
  [[nodiscard]] CUgraphExec native_exec() const noexcept { return exec_.native_handle(); }
  /// Where this graph's host calls report exceptions (a parent embedding it watches them too).
  [[nodiscard]] const std::shared_ptr<HostCallErrors>& host_errors() const noexcept { return host_errors_; }

 private:
  /// Marks the thread that runs an update or records an update_from op: the op using this same graph would
  /// wait for the lock its own thread holds; guard() reports that instead.
  class Recording {
   public:
    explicit Recording(const GraphState& g) : g_(g) { g_.recording_thread_.store(std::this_thread::get_id()); }
    ~Recording() { g_.recording_thread_.store(std::thread::id{}); }
    Recording(const Recording&) = delete;
    Recording& operator=(const Recording&) = delete;

   private:
    const GraphState& g_;
  };
  /// \throws CudaError (CUDA_ERROR_OUT_OF_MEMORY) when `bytes` of scratch memory cannot be mapped now.
  void check_scratch_fits(std::size_t bytes) const;
  /// Records the scratch size of the graph replayed now (in the pool's accounts too).
  void set_scratch_bytes(std::size_t bytes);
  void set_transfers(const GraphRecording& recording) noexcept {
    bytes_to_device_ = recording.bytes_to_device();
    bytes_to_host_ = recording.bytes_to_host();
  }
  /// The graph's lock. \throws UsageError when the calling thread is recording an update_from of this graph.
  [[nodiscard]] std::unique_lock<std::mutex> guard() const;
  void order_after_replays_elsewhere();
  void hold_no_throw(DeferredRelease::Owners owners) noexcept;
  void instantiate();
  void release_after_replays(DeferredRelease::Owners owners);
  UpdateResult replace_plan(NodePlan plan, Owners owners, const UpdateOptions& options);
  /// Fills the empty `graph` from `plan` (whose conditions were made for it) and replays that from now on.
  UpdateResult reinstantiate_built(driver::Graph graph, NodePlan plan, Owners owners, UpdateResult why);
  UpdateResult replace_graph(driver::Graph graph, Owners owners, const UpdateOptions& options);
  UpdateResult reinstantiate(driver::Graph graph, Owners owners, UpdateResult why);
  [[nodiscard]] CUgraph template_graph_locked() const;

  std::shared_ptr<Stream> owned_stream_;  ///< the graph's own stream, or its pool's
  Stream& stream_;                        ///< *owned_stream_
  std::shared_ptr<GraphPoolState> pool_;  ///< GraphOptions::pool's
  GraphOptions options_;
  driver::Graph graph_;  ///< what exec_ was instantiated from (its nodes are nodes_)
  driver::GraphExec exec_;
  std::optional<NodePlan> plan_;
  std::vector<CUgraphNode> nodes_;
  bool captured_conditions_ = false;  ///< Recorded::captured_conditions, for the graph replayed now
  bool captured_scratch_ = false;     ///< Recorded::captured_scratch, the same
  std::shared_ptr<const void> scratch_tag_;
  std::size_t scratch_bytes_ = 0;
  std::size_t bytes_to_device_ = 0;  ///< per replay, of the op replayed now
  std::size_t bytes_to_host_ = 0;
  /// Built graphs updated in place: graph_ keeps the first parameters, so a copy with the current ones is made
  /// when one is needed (child graphs), and remade after the next update.
  mutable driver::Graph current_template_;
  mutable bool template_stale_ = false;
  std::shared_ptr<const Owners> owners_;
  std::shared_ptr<const void> scope_;
  std::shared_ptr<HostCallErrors> host_errors_;
  mutable std::mutex mutex_;
  mutable std::atomic<std::thread::id> recording_thread_{};
  DeferredRelease held_;               ///< owners of updates, until their copies have run
  std::optional<Event> updates_done_;  ///< recorded on stream_ for a replay elsewhere to wait on
  std::optional<Event> last_replay_elsewhere_;
  std::optional<Event> caller_ready_;  ///< pooled graphs: recorded on the caller's stream for the pool's to wait on
  std::uint64_t replays_ = 0;
  bool uploaded_ = false;
  bool updates_pending_ = false;           ///< updates queued on stream_ since the last replay
  bool replay_elsewhere_pending_ = false;  ///< a replay on another stream that stream_ has not waited for
  bool launched_elsewhere_ = false;
};

}  // namespace detail
}  // namespace lazygraph
