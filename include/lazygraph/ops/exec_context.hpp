#pragma once
/// \file
/// ExecContext: what an op executes against. Ops submit their work through it — `launch`, `copy` (and the pinned
/// host copies `copy_to_device` / `copy_to_host`), `fill`,
/// `host_function`, `child_graph`, `record_event`, `wait_event` — and it carries that work out in one of three
/// modes:
///   - eager: the work runs on a stream (`sync_on`, `CudaGraph::update`);
///   - capture: the stream is capturing, so the work becomes graph nodes (`CudaGraph::scope`, `capture`);
///   - plan: nothing is submitted; each piece of work is written down as a node of a NodePlan with its
///     dependencies (`CudaGraph::build`, and `update_from` on a built graph).
/// It also forks and joins the branches of `all(...)`, and collects the owners (buffers, kernels) that a graph
/// must keep alive.
///
/// An op of your own may still submit to `stream()` directly: that works eagerly and under capture, but not in
/// plan mode, where nothing is submitted — such an op does not say `builds_without_capture`, and
/// CudaGraph::build refuses it at compile time.

#include <cuda.h>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/detail/driver/capture.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/ops/node_plan.hpp"
#include "lazygraph/driver/stream.hpp"

namespace lazygraph {

/// One kernel launch as the driver takes it: made by the kernels layer's launch op.
struct KernelSubmission {
  /// The function to launch.
  CUfunction function = nullptr;
  /// Grid, block, dynamic shared memory, programmatic launch.
  detail::driver::LaunchShape shape;
  /// `arg_count` pointers to the argument values (and a null after them).
  void** args = nullptr;
  /// The size in bytes of each argument.
  const std::size_t* arg_sizes = nullptr;
  /// The number of arguments.
  std::size_t arg_count = 0;
  /// The kernel's name, for errors (must outlive the graph when planning: the kernel's own name does).
  std::string_view name;
  /// The bytes of the device memory its span arguments view (an upper bound on what it reads and writes; the
  /// profile's "bytes", ops/profile.hpp).
  std::size_t span_bytes = 0;
};

/// Told about every kernel an eager ExecContext launches (ExecContext::observe): the profiler (ops/profile.hpp)
/// records an event on `stream` before and after each. Never called while recording a graph.
class LaunchObserver {
 public:
  /// An observer of nothing yet (ExecContext::observe attaches it).
  LaunchObserver() = default;
  LaunchObserver(const LaunchObserver&) = delete;
  LaunchObserver& operator=(const LaunchObserver&) = delete;
  virtual ~LaunchObserver() = default;
  /// Before `kernel` is launched on `stream`, inside the labels `labels` (outermost first, ExecContext::labels).
  virtual void before(const KernelSubmission& kernel, const Stream& stream,
                      std::span<const std::string_view> labels) = 0;
  /// After it was launched.
  virtual void after(const KernelSubmission& kernel, const Stream& stream) = 0;
};

/// Where host functions (host_call) report exceptions: they run on a driver thread, where nothing can catch
/// them, so the first one is kept here until the graph's next launch or synchronize throws it.
class HostCallErrors {
 public:
  /// Keeps `error` from the host call `name` unless an earlier one is pending.
  void report(std::string_view name, std::exception_ptr error) noexcept;
  /// Throws (once) the pending error as HostCallError naming the host call; nothing when none is pending.
  /// Errors of the watched channels (graphs embedded as children) count too.
  void rethrow_pending();
  /// Also reports, from rethrow_pending, what `other` keeps: the host calls of a child graph report to the
  /// child's channel, and the run that embedded it must see them.
  void watch(std::shared_ptr<HostCallErrors> other);

 private:
  std::mutex mutex_;
  std::atomic<bool> pending_{false};   ///< error_ is set (read without the lock on every replay)
  std::atomic<bool> watching_{false};  ///< watched_ is not empty
  std::vector<std::shared_ptr<HostCallErrors>> watched_;
  std::exception_ptr error_;
  std::string name_;
};

namespace detail {
/// What every scratch span's owner points at (its control block is the graph's scratch tag): keep_alive recognises
/// scratch memory by this address and checks that it is used only while recording its own graph.
inline const char scratch_marker = 0;
}  // namespace detail

/// Memory that belongs to the graph being recorded (ExecContext::scratch): its address, and the owner that marks a
/// span of it as scratch of this graph.
struct ScratchAllocation {
  /// The device address, fixed for the graph's life; the memory is valid only while the graph runs.
  CUdeviceptr address = 0;
  /// Give it to the spans of this memory (DeviceSpan's owner): ops that use them are checked against the graph.
  std::shared_ptr<const void> owner;
};

/// What ops execute against (see the file comment). sync_on, Scope and CudaGraph make one; an op of your own
/// only receives it in `execute`.
///
/// Exception safety: if an op throws during execution, the context stays consistent; side streams already
/// forked are joined back by the `all` op before it rethrows.
class ExecContext {
 public:
  /// Executes on `stream`: eagerly, or, with `recording` true, into the graph `stream` is capturing.
  ExecContext(const Stream& stream, bool recording, std::shared_ptr<HostCallErrors> host_errors = nullptr);
  /// Writes work down in `plan` instead of submitting it; `stream` only names the device (and is what `stream()`
  /// returns, for ops that ask).
  ExecContext(const Stream& stream, detail::NodePlan& plan, std::shared_ptr<HostCallErrors> host_errors = nullptr);
  ExecContext(const ExecContext&) = delete;
  ExecContext& operator=(const ExecContext&) = delete;
  /// An eager context through which a host call was submitted, and which still keeps its owners (nobody took
  /// them), waits here for its stream: the driver reads the call's record when the stream reaches it. Never throws.
  ~ExecContext();

  /// The stream work goes to now: the context's own, or inside a fork_join branch, that branch's. In plan mode
  /// nothing submitted to it becomes part of the plan.
  [[nodiscard]] const Stream& stream() const noexcept { return *current_; }
  /// True while a graph is recorded (captured or planned): submitted work becomes graph nodes instead of running.
  [[nodiscard]] bool recording() const noexcept { return recording_; }
  /// True in plan mode (CudaGraph::build): work is written down as nodes, nothing is submitted.
  [[nodiscard]] bool planning() const noexcept { return plan_ != nullptr; }

  /// Submits a kernel launch. \throws CudaError when the driver refuses it.
  void launch(const KernelSubmission& kernel);
  /// Eager contexts: tells `observer` (or nobody, for null) about every kernel launched from here on. It must outlive
  /// its use. Ignored while recording.
  void observe(LaunchObserver* observer) noexcept { observer_ = observer; }
  /// Enters a named part of the work (`named(label, op)`): an NVTX range, and a label the profiler reports.
  /// `label` must outlive the matching pop_label (NamedOp's own string does): it is kept as a view, not copied.
  void push_label(const std::string& label);
  /// Leaves the innermost named part.
  void pop_label() noexcept;
  /// The names of the parts being executed, outermost first.
  [[nodiscard]] std::span<const std::string_view> labels() const noexcept { return labels_; }
  /// Copies `bytes` bytes between device addresses (nothing for 0).
  void copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes);
  /// Copies `bytes` bytes from pinned host memory to the device (a memcpy node in a graph; the host memory must be
  /// pinned, so that the graph may read it on every replay, and stay valid as long as the work may run).
  void copy_to_device(CUdeviceptr dst, const void* host, std::size_t bytes);
  /// Copies `bytes` bytes from the device to pinned host memory (as copy_to_device, the other way).
  void copy_to_host(void* host, CUdeviceptr src, std::size_t bytes);
  /// Counts host transfers that an op makes some other way than copy_to_device / copy_to_host (a kernel that
  /// reads or writes pinned host memory), for bytes_to_device and bytes_to_host. Nothing when not recording or
  /// inside a conditional body.
  void count_host_transfer(std::size_t to_device, std::size_t to_host) noexcept {
    if (!recording_ || body_of_ != nullptr) return;
    bytes_to_device_ += to_device;
    bytes_to_host_ += to_host;
  }
  /// The bytes the host copies recorded so far move per replay, host to device and device to host (copies inside
  /// conditional bodies, which may run any number of times, not counted).
  [[nodiscard]] std::size_t bytes_to_device() const noexcept { return bytes_to_device_; }
  /// See bytes_to_device.
  [[nodiscard]] std::size_t bytes_to_host() const noexcept { return bytes_to_host_; }
  /// Sets `count` elements of `element_size` (1, 2 or 4) bytes to the low bytes of `pattern` (nothing for 0).
  void fill(CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count);
  /// Calls `fn(data)` on a driver thread when the work before it has completed. `data` must live as long as the
  /// work may run: keep_alive its owner (a graph keeps it as long as it lives; an eager context until its stream
  /// has run the call, waiting for that when destroyed first).
  void host_function(CUhostFn fn, void* data, std::string_view name);
  /// Embeds a copy of `graph` as one node (capture and plan mode only; eagerly, launch the graph instead).
  void child_graph(CUgraph graph);
  /// A conditional node: IF, WHILE or SWITCH with `size` bodies, steered by the graph's conditional `handle`.
  /// `body(i, ctx)` records body i through `ctx`, which captures into that body graph (on a stream of its own) or,
  /// when planning, writes it down as a plan nested in this one; what it keeps alive, this context keeps. A body may
  /// hold conditional nodes itself (their conditions are the outermost graph's, like every condition).
  /// \throws UsageError eagerly (a conditional node belongs to a graph), or for a driver too old for `type` and
  /// `size` (naming its version).
  void conditional(CUgraphConditionalHandle handle, CUgraphConditionalNodeType type, unsigned size,
                   const std::function<void(unsigned, ExecContext&)>& body);
  /// A new condition of the graph being recorded (Scope::condition), starting every launch at `default_value`.
  /// Captured: made for the capture's graph. Planned: made for the graph given to make_conditions_in, or, when
  /// re-planning a built graph (reuse_conditions), the graph's own condition of the same position. Until a
  /// conditional node consumes it, check_conditions_consumed throws.
  /// \throws UsageError eagerly, inside a conditional body, or in plan mode with neither of the two set.
  CUgraphConditionalHandle make_condition(unsigned default_value);
  /// Plan mode: conditions are made for `graph` (the graph that materialize will fill from the plan).
  void make_conditions_in(CUgraph graph) noexcept { condition_graph_ = graph; }
  /// Plan mode, re-planning a built graph: condition k is `existing[k]` when its default value matches; otherwise a
  /// null handle that the plan's comparison reports (more conditions, or another default, need a new graph).
  void reuse_conditions(const std::vector<detail::PlannedCondition>& existing) noexcept {
    reused_conditions_ = &existing;
  }
  /// `bytes` bytes of memory that belong to the graph being recorded (Scope::scratch): an allocation node before the
  /// work recorded after this call and a free node after all of it (captured: cuMemAllocAsync now, cuMemFreeAsync at
  /// finish_scratch; planned: an allocation node added to the graph given to make_conditions_in, or, re-planning a
  /// built graph, the graph's own scratch of the same position and size). Spans of it carry `owner`: an op that
  /// uses one eagerly, or in another graph, throws UsageError (keep_alive checks).
  /// \throws UsageError eagerly, inside a conditional body, for 0 bytes, or in plan mode with no graph to add to.
  ScratchAllocation scratch(std::size_t bytes);
  /// Plan mode, re-planning a built graph: scratch k is `existing[k]` when its size matches (otherwise address 0,
  /// which the plan's comparison reports), and spans of it are recognised by the graph's `tag`.
  void reuse_scratch(const std::vector<detail::PlannedScratch>& existing, std::shared_ptr<const void> tag) noexcept {
    reused_scratch_ = &existing;
    scratch_tag_ = std::move(tag);
  }
  /// Capture mode: frees the scratch memory captured so far, after all the work captured so far (call it once the
  /// recording is complete, before the capture ends). Nothing in the other modes.
  void finish_scratch();
  /// What identifies this recording's scratch memory (null when it made none and reuses none).
  [[nodiscard]] const std::shared_ptr<const void>& scratch_tag() const noexcept { return scratch_tag_; }
  /// The bytes of scratch memory made (or reused) through this context.
  [[nodiscard]] std::size_t scratch_bytes() const noexcept { return scratch_bytes_; }
  /// How many conditions make_condition made through this context.
  [[nodiscard]] std::size_t conditions_made() const noexcept { return conditions_made_; }
  /// \throws UsageError when a condition made for this graph steers no conditional node (CUDA refuses to
  /// instantiate such a graph).
  void check_conditions_consumed() const;
  /// A node without work that everything after it depends on (an empty node in a graph; nothing eagerly, where
  /// a stream orders the work anyway).
  void join();
  /// Records `event` here: later waits on it order after the work before it (a record node in a graph).
  void record_event(CUevent event);
  /// Makes the work after this wait for what `event` last recorded (a wait node in a graph).
  void wait_event(CUevent event);

  /// Keeps `owner` alive as long as the work that uses it may run: for a graph, as long as the graph lives.
  /// \throws UsageError when `owner` is a graph's scratch memory and this context is not recording that graph.
  void keep_alive(const std::shared_ptr<const void>& owner);
  /// Everything kept alive so far (the graph takes these when recording ends).
  [[nodiscard]] std::vector<std::shared_ptr<const void>> take_owners() noexcept { return std::move(owners_); }
  /// Where host calls executed through this context report exceptions.
  [[nodiscard]] const std::shared_ptr<HostCallErrors>& host_errors();
  /// Throws the first exception a host call executed through this context reported, if any (HostCallError).
  void rethrow_host_errors() {
    if (host_errors_) host_errors_->rethrow_pending();
  }

  /// Runs `branches.size()` pieces of work concurrently: branch i executes with stream() switched to its own
  /// stream (branch 0 on the current one), each starting after the work already submitted and all finishing
  /// before any later work. When recording, they become parallel branches of the graph.
  template <class... F>
  void fork_join(F&&... branches);

  /// Runs `after.size()` pieces of work, piece i (`piece(i)`) after the pieces listed in `after[i]` (each below i)
  /// and after the work before this call; the work after this call follows all of them. When recording, piece i's
  /// first nodes depend only on the last nodes of the pieces it follows, so independent pieces become parallel
  /// branches (dataflow(...) computes `after` from what the pieces read and write). Eagerly, the pieces run in
  /// order on stream(), which keeps every ordering asked for.
  template <class F>
  void run_dataflow(std::span<const std::vector<std::uint32_t>> after, F&& piece);

 private:
  struct Fork;
  struct Dataflow;
  Dataflow begin_dataflow(std::size_t count);
  void enter_piece(Dataflow& flow, std::span<const std::uint32_t> after);
  void leave_piece(Dataflow& flow, std::size_t index);
  void end_dataflow(Dataflow& flow, std::span<const std::vector<std::uint32_t>> after);
  Fork begin_fork(std::size_t count);
  void enter_branch(Fork& fork, std::size_t index);
  void leave_branch(Fork& fork);
  void end_fork(Fork& fork) noexcept(false);
  const Stream& side_stream(std::size_t index);
  void add_planned(detail::PlannedNode node);

  const Stream* current_;
  const Stream* origin_;  ///< the stream given at construction (branches join back to it)
  bool recording_;
  bool eager_host_calls_ = false;  ///< a host function was submitted eagerly (see the destructor)
  LaunchObserver* observer_ = nullptr;
  std::vector<std::string_view> labels_;  ///< views of the NamedOps being executed
  detail::NodePlan* plan_ = nullptr;
  /// Set while this context records the body of a conditional node: what CUDA refuses there (host calls, events,
  /// another conditional node from this layer) is a UsageError instead of a driver error.
  const char* body_of_ = nullptr;
  void refuse_in_body(std::string_view what) const;
  void check_conditional_supported(CUgraphConditionalNodeType type, unsigned size) const;
  void record_body(unsigned index, CUgraphConditionalNodeType type, ExecContext& inner,
                   const std::function<void(unsigned, ExecContext&)>& body);
  ExecContext* root_ = this;           ///< the outermost context (bodies' contexts point to it)
  CUgraph condition_graph_ = nullptr;  ///< plan mode: where make_condition makes conditions
  const std::vector<detail::PlannedCondition>* reused_conditions_ = nullptr;  ///< plan mode: a built graph's
  std::vector<std::uint32_t> frontier_;  ///< plan mode: the nodes the next node depends on
  std::shared_ptr<HostCallErrors> host_errors_;
  std::vector<std::shared_ptr<const void>> owners_;
  std::vector<std::unique_ptr<Stream>> side_streams_;
  std::vector<CUgraphConditionalHandle> unconsumed_conditions_;
  [[noreturn]] void refuse_scratch() const;
  std::shared_ptr<const void> scratch_tag_;  ///< identifies the graph's scratch (its control block)
  const std::vector<detail::PlannedScratch>* reused_scratch_ = nullptr;  ///< plan mode: a built graph's
  std::vector<CUdeviceptr> scratch_to_free_;                             ///< capture mode: until finish_scratch
  std::size_t scratch_bytes_ = 0;
  std::size_t conditions_made_ = 0;
  std::size_t bytes_to_device_ = 0;
  std::size_t bytes_to_host_ = 0;
  std::size_t side_streams_in_use_ = 0;
  std::vector<Event> events_;  // kept until the context ends: a recorded event wait refers to them
};

struct ExecContext::Fork {
  const Stream* origin = nullptr;
  std::size_t first_side = 0;
  std::size_t count = 0;
  std::vector<std::uint32_t> start;   ///< plan mode: the frontier every branch starts from
  std::vector<std::uint32_t> joined;  ///< plan mode: the union of the branches' frontiers
};

/// Where each piece of a run_dataflow ended (plan mode: node indices; capture mode: captured nodes).
struct ExecContext::Dataflow {
  std::vector<std::uint32_t> planned_start;                 ///< plan mode: the frontier before the first piece
  std::vector<std::vector<std::uint32_t>> planned_ends;     ///< plan mode: each piece's last nodes
  detail::driver::CapturePoint captured_start;              ///< capture mode: where the capture stood before
  std::vector<detail::driver::CapturePoint> captured_ends;  ///< capture mode: where each piece left it
};

template <class F>
void ExecContext::run_dataflow(std::span<const std::vector<std::uint32_t>> after, F&& piece) {
  if (!recording_) {
    for (std::size_t i = 0; i < after.size(); ++i) piece(i);
    return;
  }
  Dataflow flow = begin_dataflow(after.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    enter_piece(flow, after[i]);
    piece(i);
    leave_piece(flow, i);
  }
  end_dataflow(flow, after);
}

template <class... F>
void ExecContext::fork_join(F&&... branches) {
  constexpr std::size_t count = sizeof...(F);
  if constexpr (count == 1) {
    (branches(), ...);
  } else {
    Fork fork = begin_fork(count);
    std::exception_ptr error;
    std::size_t index = 0;
    const auto run_branch = [&](auto& branch) {
      enter_branch(fork, index);
      ++index;
      if (!error) {
        try {
          branch();
        } catch (...) {
          error = std::current_exception();
        }
      }
      leave_branch(fork);
    };
    (run_branch(branches), ...);
    current_ = fork.origin;
    end_fork(fork);
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace lazygraph
