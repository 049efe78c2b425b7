#pragma once
/// \file
/// The untyped core of CudaGraph: the capture session, and the captured, instantiated, uploaded graph with
/// the owners of every buffer (and kernel module) its nodes use.

#include <cuda.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lazygraph/detail/driver/deferred_release.hpp"
#include "lazygraph/detail/driver/graph_handle.hpp"
#include "lazygraph/detail/driver/stream.hpp"
#include "lazygraph/detail/ops/exec_context.hpp"

namespace lazygraph {

/// How a capture treats CUDA calls that are unsafe during capture from other threads (cudaStreamCaptureMode).
enum class CaptureMode {
  this_thread,  ///< unsafe calls from this thread fail (the default)
  global,       ///< unsafe calls from any thread fail
  relaxed,      ///< nothing is checked
};

/// Where a stream stands with respect to capture.
enum class CaptureStatus { none, active, invalidated };
/// \var CaptureStatus::none
/// Not capturing.
/// \var CaptureStatus::active
/// Capturing: work submitted to the stream is recorded, not run.
/// \var CaptureStatus::invalidated
/// Capturing, but an illegal call broke the capture: ending it will fail.

/// The kind of one node of a captured graph.
enum class NodeKind { kernel, memcpy, memset, host, child_graph, empty, wait_event, event_record, other };
/// \var NodeKind::kernel
/// A kernel launch.
/// \var NodeKind::memcpy
/// A copy (`copy`, device to device).
/// \var NodeKind::memset
/// A fill (`fill`).
/// \var NodeKind::host
/// A host function call (lazygraph records none).
/// \var NodeKind::child_graph
/// A graph nested as one node.
/// \var NodeKind::empty
/// A node without work, used to join dependencies.
/// \var NodeKind::wait_event
/// A wait for an event recorded outside the graph.
/// \var NodeKind::event_record
/// An event record.
/// \var NodeKind::other
/// Any other kind (conditional nodes, memory nodes, ...).

/// The dependencies of a captured graph: `programmatic` of them let the downstream kernel start before the
/// upstream one completes (kernels launched with LaunchConfig::early_launch), the rest are full dependencies.
struct EdgeCounts {
  /// The downstream node starts after the upstream one has completed.
  std::size_t full = 0;
  /// The downstream kernel may start while the upstream one finishes.
  std::size_t programmatic = 0;
};

/// Where `stream` stands now (asks the driver). \throws UsageError on a moved-from Stream.
[[nodiscard]] CaptureStatus capture_status(const Stream& stream);
/// The enumerator's name, e.g. "child_graph"; never null.
[[nodiscard]] const char* to_string(NodeKind kind) noexcept;

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

/// A captured graph, instantiated and uploaded, with its own stream for replays.
///
/// Thread safety: launch_on, launch_and_wait and update may be called from several threads at once; each is
/// atomic with respect to the others (a mutex guards the bookkeeping; the wait of launch_and_wait happens
/// outside it).
class GraphState {
 public:
  /// \param scope the Scope the graph was recorded through, kept so that a reference to it stays valid (and
  ///              reports UsageError) for as long as the graph lives.
  GraphState(const Device& device, driver::Graph graph, std::vector<std::shared_ptr<const void>> owners,
             std::shared_ptr<const void> scope);
  ~GraphState();
  GraphState(const GraphState&) = delete;
  GraphState& operator=(const GraphState&) = delete;

  void launch_on(const Stream& stream);
  void launch_and_wait();
  /// Runs `submit(ExecContext&)` on the graph's stream, ordered after every replay queued so far (on any
  /// stream) and before the next; the owners it records are kept until that work completes.
  template <class F>
  void update(F&& submit) {
    const std::lock_guard<std::mutex> lock(mutex_);
    order_after_replays_elsewhere();
    ExecContext ctx(stream_, false);
    try {
      submit(ctx);
    } catch (...) {
      hold_no_throw(ctx.take_owners());  // part of the op may have been submitted
      throw;
    }
    held_.hold(stream_, ctx.take_owners());
    updates_pending_ = true;
    held_.collect();
  }

  [[nodiscard]] const Stream& stream() const noexcept { return stream_; }
  [[nodiscard]] std::size_t node_count() const;
  [[nodiscard]] std::vector<NodeKind> node_kinds() const;
  [[nodiscard]] EdgeCounts edge_counts() const;
  void write_dot(const std::filesystem::path& path) const;

 private:
  void order_after_replays_elsewhere();
  void hold_no_throw(DeferredRelease::Owners owners) noexcept;

  Stream stream_;
  driver::Graph graph_;
  driver::GraphExec exec_;
  std::vector<std::shared_ptr<const void>> owners_;
  std::shared_ptr<const void> scope_;
  mutable std::mutex mutex_;
  DeferredRelease held_;               ///< owners of updates, until their copies have run
  std::optional<Event> updates_done_;  ///< recorded on stream_ for a replay elsewhere to wait on
  std::optional<Event> last_replay_elsewhere_;
  bool updates_pending_ = false;           ///< updates queued on stream_ since the last replay
  bool replay_elsewhere_pending_ = false;  ///< a replay on another stream that stream_ has not waited for
  bool launched_elsewhere_ = false;
};

}  // namespace detail
}  // namespace lazygraph
