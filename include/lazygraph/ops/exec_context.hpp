#pragma once
/// \file
/// ExecContext: what an op executes against. Ops submit their work through it (`launch`, `copy`, `copy_2d`, the
/// pinned host copies `copy_to_device` / `copy_to_host`, `fill`, `host_function`, `record_event`, `wait_event`,
/// `join`), keep alive what that work uses (`keep_alive`), and compose parts with `fork_join` and `run_dataflow`.
/// The context carries the work out in one of three modes (detail/ops/submission.hpp, a file each):
///   - eager: the work runs on a stream (`sync_on`, `CudaGraph::update`);
///   - capture: the stream is capturing, so the work becomes graph nodes (`CudaGraph::scope`, `capture`);
///   - plan: nothing is submitted; each piece of work is written down as a node of a NodePlan with its
///     dependencies (`CudaGraph::build`, and `update_from` on a built graph).
/// What only a graph has (conditions, scratch memory, child graphs and conditional bodies, transfer counts) is the
/// graph layer's (Scope, detail/graph/graph_recording.hpp), not the context's.
///
/// An op of your own may still submit to `stream()` directly: that works eagerly and under capture, but not in
/// plan mode, where nothing is submitted; such an op does not say `builds_without_capture`, and
/// CudaGraph::build refuses it at compile time.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/detail/driver/launch_shape.hpp"
#include "lazygraph/driver/stream.hpp"
#include "lazygraph/ops/host_call_errors.hpp"

namespace lazygraph::detail {
class Submission;
class GraphHooks;
class ExecContextAccess;
struct NodePlan;
}  // namespace lazygraph::detail

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

namespace detail {
/// What every scratch span's owner points at (its control block is the graph's scratch tag): keep_alive recognises
/// scratch memory by this address and checks that it is used only while recording its own graph.
inline const char scratch_marker = 0;
}  // namespace detail

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
  [[nodiscard]] const Stream& stream() const noexcept;
  /// True while a graph is recorded (captured or planned): submitted work becomes graph nodes instead of running.
  [[nodiscard]] bool recording() const noexcept { return recording_; }
  /// True in plan mode (CudaGraph::build): work is written down as nodes, nothing is submitted.
  [[nodiscard]] bool planning() const noexcept { return planning_; }

  /// Submits a kernel launch. \throws CudaError when the driver refuses it.
  void launch(const KernelSubmission& kernel);
  /// Copies `bytes` bytes between device addresses (nothing for 0).
  void copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes);
  /// Copies `rows` rows of `width` bytes between device addresses, row r from `src + r * src_pitch` to
  /// `dst + r * dst_pitch` (one memcpy node in a graph; nothing when `width` or `rows` is 0). The shape must be one
  /// check_copy_2d accepted (driver/memcpy.hpp). \throws CudaError when the driver refuses the pitches.
  void copy_2d(CUdeviceptr dst, std::size_t dst_pitch, CUdeviceptr src, std::size_t src_pitch, std::size_t width,
               std::size_t rows);
  /// Copies `bytes` bytes from pinned host memory to the device (a memcpy node in a graph; the host memory must be
  /// pinned, so that the graph may read it on every replay, and stay valid as long as the work may run).
  void copy_to_device(CUdeviceptr dst, const void* host, std::size_t bytes);
  /// Copies `bytes` bytes from the device to pinned host memory (as copy_to_device, the other way).
  void copy_to_host(void* host, CUdeviceptr src, std::size_t bytes);
  /// Counts host transfers that an op makes some other way than copy_to_device / copy_to_host (a kernel that
  /// reads or writes pinned host memory), for the graph's transfer statistics. Nothing when no graph is recorded
  /// or inside a conditional body (which may run any number of times).
  void count_host_transfer(std::size_t to_device, std::size_t to_host) noexcept;
  /// Sets `count` elements of `element_size` (1, 2 or 4) bytes to the low bytes of `pattern` (nothing for 0).
  void fill(CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count);
  /// Calls `fn(data)` on a driver thread when the work before it has completed. `data` must live as long as the
  /// work may run: keep_alive its owner (a graph keeps it as long as it lives; an eager context until its stream
  /// has run the call, waiting for that when destroyed first). \throws UsageError inside a conditional body.
  void host_function(CUhostFn fn, void* data, std::string_view name);
  /// A node without work that everything after it depends on (an empty node in a graph; nothing eagerly, where
  /// a stream orders the work anyway).
  void join();
  /// Records `event` here: later waits on it order after the work before it (a record node in a graph).
  /// \throws UsageError inside a conditional body.
  void record_event(CUevent event);
  /// Makes the work after this wait for what `event` last recorded (a wait node in a graph).
  /// \throws UsageError inside a conditional body.
  void wait_event(CUevent event);

  /// Keeps `owner` alive as long as the work that uses it may run: for a graph, as long as the graph lives.
  /// \throws UsageError when `owner` is a graph's scratch memory and this context is not recording that graph.
  void keep_alive(const std::shared_ptr<const void>& owner);
  /// Everything kept alive so far (the graph, or an eager caller that outlives the work, takes these).
  [[nodiscard]] std::vector<std::shared_ptr<const void>> take_owners() noexcept { return std::move(owners_); }
  /// Where host calls executed through this context report exceptions.
  [[nodiscard]] const std::shared_ptr<HostCallErrors>& host_errors();
  /// Throws the first exception a host call executed through this context reported, if any (HostCallError).
  void rethrow_host_errors() {
    if (host_errors_) host_errors_->rethrow_pending();
  }

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
  friend class detail::ExecContextAccess;
  /// A context over a submission it does not own (a conditional body's: the body outlives the context).
  ExecContext(detail::Submission& submission, std::shared_ptr<HostCallErrors> host_errors);
  // fork_join's and run_dataflow's steps, forwarded to the submission (defined where it is complete).
  void begin_fork(std::size_t count);
  void enter_branch(std::size_t index);
  void leave_branch();
  void end_fork();
  void begin_dataflow(std::size_t count);
  void enter_piece(std::span<const std::uint32_t> after);
  void leave_piece(std::size_t index);
  void end_dataflow(std::span<const std::vector<std::uint32_t>> after);

  std::unique_ptr<detail::Submission> owned_;  ///< the submission, unless it is borrowed
  detail::Submission* submission_;
  bool recording_;
  bool planning_;
  detail::GraphHooks* hooks_ = nullptr;  ///< the graph being recorded (detail/ops/graph_access.hpp)
  LaunchObserver* observer_ = nullptr;
  std::vector<std::string_view> labels_;  ///< views of the NamedOps being executed
  std::shared_ptr<HostCallErrors> host_errors_;
  std::vector<std::shared_ptr<const void>> owners_;
};

template <class F>
void ExecContext::run_dataflow(std::span<const std::vector<std::uint32_t>> after, F&& piece) {
  if (!recording_) {
    for (std::size_t i = 0; i < after.size(); ++i) piece(i);
    return;
  }
  begin_dataflow(after.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    enter_piece(after[i]);
    piece(i);
    leave_piece(i);
  }
  end_dataflow(after);
}

template <class... F>
void ExecContext::fork_join(F&&... branches) {
  constexpr std::size_t count = sizeof...(F);
  if constexpr (count == 1) {
    (branches(), ...);
  } else {
    begin_fork(count);
    std::exception_ptr error;
    std::size_t index = 0;
    const auto run_branch = [&](auto& branch) {
      enter_branch(index);
      ++index;
      if (!error) {
        try {
          branch();
        } catch (...) {
          error = std::current_exception();
        }
      }
      leave_branch();
    };
    (run_branch(branches), ...);
    end_fork();
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace lazygraph
