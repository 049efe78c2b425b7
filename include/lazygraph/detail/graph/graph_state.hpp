#pragma once
/// \file
/// The untyped core of CudaGraph: the capture session, and the captured, instantiated, uploaded graph with
/// the owners of every buffer its nodes touch.

#include <cuda.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lazygraph/detail/driver/stream.hpp"

namespace lazygraph {

/// How a capture treats CUDA calls that are unsafe during capture from other threads (cudaStreamCaptureMode).
enum class CaptureMode {
  this_thread,  ///< unsafe calls from this thread fail (the default)
  global,       ///< unsafe calls from any thread fail
  relaxed,      ///< nothing is checked
};

/// Where a stream stands with respect to capture.
enum class CaptureStatus { none, active, invalidated };

/// The kind of one node of a captured graph.
enum class NodeKind { kernel, memcpy, memset, host, child_graph, empty, wait_event, event_record, other };

/// The dependencies of a captured graph: `programmatic` of them let the downstream kernel start before the
/// upstream one completes (kernels launched with LaunchConfig::early_launch), the rest are full dependencies.
struct EdgeCounts {
  std::size_t full = 0;
  std::size_t programmatic = 0;
};

[[nodiscard]] CaptureStatus capture_status(const Stream& stream);
[[nodiscard]] const char* to_string(NodeKind kind) noexcept;

namespace detail {

/// Begins capturing on construction; `finish` returns the graph, `abort` (or the destructor) ends the capture
/// and destroys whatever was captured, leaving the stream usable.
class CaptureSession {
 public:
  CaptureSession(const Stream& stream, CaptureMode mode);
  ~CaptureSession();
  CaptureSession(const CaptureSession&) = delete;
  CaptureSession& operator=(const CaptureSession&) = delete;

  /// \throws CaptureError when the capture was invalidated by an illegal call during it.
  CUgraph finish();
  void abort() noexcept;

 private:
  const Stream* stream_;
  bool active_ = false;
};

/// A captured graph, instantiated and uploaded, with its own stream for replays.
class GraphState {
 public:
  GraphState(const Device& device, CUgraph graph, std::vector<std::shared_ptr<const void>> owners);
  ~GraphState();
  GraphState(const GraphState&) = delete;
  GraphState& operator=(const GraphState&) = delete;

  void launch_on(const Stream& stream);
  void launch_and_wait();
  const Stream& stream() const noexcept { return stream_; }
  /// Keeps `owners` alive until the next launch_and_wait (they belong to work queued before it).
  void hold_until_next_launch(std::vector<std::shared_ptr<const void>> owners);

  [[nodiscard]] std::size_t node_count() const;
  [[nodiscard]] std::vector<NodeKind> node_kinds() const;
  [[nodiscard]] EdgeCounts edge_counts() const;
  void write_dot(const std::filesystem::path& path) const;

 private:
  Stream stream_;
  std::optional<Event> updates_done_;  ///< made when first needed (launch_on another stream after an update)
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  std::vector<std::shared_ptr<const void>> owners_;
  std::vector<std::shared_ptr<const void>> pending_;
  bool pending_updates_ = false;
  bool launched_elsewhere_ = false;  ///< a replay went to a stream other than stream_
};

}  // namespace detail
}  // namespace lazygraph
