#include <array>
#include <string>

#include "lazygraph/detail/driver/capture.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/driver/error.hpp"
#include "lazygraph/detail/graph/graph_state.hpp"

namespace lazygraph {

namespace drv = detail::driver;

CaptureStatus capture_status(const Stream& stream) {
  switch (drv::capture_status(stream.device().context(), stream.get())) {
    case CU_STREAM_CAPTURE_STATUS_ACTIVE:
      return CaptureStatus::active;
    case CU_STREAM_CAPTURE_STATUS_INVALIDATED:
      return CaptureStatus::invalidated;
    default:
      return CaptureStatus::none;
  }
}

const char* to_string(NodeKind kind) noexcept {
  switch (kind) {
    case NodeKind::kernel:
      return "kernel";
    case NodeKind::memcpy:
      return "memcpy";
    case NodeKind::memset:
      return "memset";
    case NodeKind::host:
      return "host";
    case NodeKind::child_graph:
      return "child_graph";
    case NodeKind::empty:
      return "empty";
    case NodeKind::wait_event:
      return "wait_event";
    case NodeKind::event_record:
      return "event_record";
    case NodeKind::other:
      return "other";
  }
  return "other";
}

namespace detail {

namespace {

CUstreamCaptureMode to_driver(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::global:
      return CU_STREAM_CAPTURE_MODE_GLOBAL;
    case CaptureMode::relaxed:
      return CU_STREAM_CAPTURE_MODE_RELAXED;
    case CaptureMode::this_thread:
      break;
  }
  return CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
}

NodeKind to_kind(CUgraphNodeType t) {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return NodeKind::kernel;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return NodeKind::memcpy;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return NodeKind::memset;
    case CU_GRAPH_NODE_TYPE_HOST:
      return NodeKind::host;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return NodeKind::child_graph;
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return NodeKind::empty;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return NodeKind::wait_event;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return NodeKind::event_record;
    default:
      return NodeKind::other;
  }
}

}  // namespace

CaptureSession::CaptureSession(const Stream& stream, CaptureMode mode) : stream_(stream.get()) {
  if (stream.is_capturing()) {
    throw CaptureError(
        "CudaGraph capture: the stream is already capturing a graph; captures do not nest — record "
        "the ops into the outer Scope instead");
  }
  drv::capture_begin(stream.device().context(), stream_, to_driver(mode));
  active_ = true;
}

CaptureSession::~CaptureSession() { abort(); }

void CaptureSession::abort() noexcept {
  if (!active_) return;
  active_ = false;
  CUgraph graph = nullptr;
  (void)drv::capture_end_no_throw(stream_, &graph);  // ends the capture whatever state it is in
  drv::graph_destroy_no_throw(graph);
}

drv::Graph CaptureSession::finish() {
  active_ = false;
  CUgraph raw = nullptr;
  const CUresult r = drv::capture_end_no_throw(stream_, &raw);
  drv::Graph graph(raw);
  if (r == CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) {
    throw CaptureError(
        "CudaGraph capture failed: the Stream being captured was destroyed during the capture, which ended it; "
        "keep the Stream alive (and in place) until CudaGraph::scope returns");
  }
  if (r != CUDA_SUCCESS || !graph) {
    throw CaptureError("CudaGraph capture failed at cuStreamEndCapture with " + drv::result_name(r) +
                       ": a call during the capture was illegal there (a synchronization, an allocation, a module "
                       "load, or work on another stream that was never joined back); record only GraphNode ops "
                       "through Scope::record and do the rest before or after the capture");
  }
  return graph;
}

void retire_failed_scope(std::shared_ptr<const void> scope) noexcept {
  thread_local std::array<std::shared_ptr<const void>, 16> recent;
  thread_local std::size_t next = 0;
  recent[next] = std::move(scope);
  next = (next + 1) % recent.size();
}

namespace {
std::string describe(std::size_t owners) { return "CudaGraph using " + std::to_string(owners) + " buffers"; }
}  // namespace

GraphState::GraphState(const Device& device, drv::Graph graph, std::vector<std::shared_ptr<const void>> owners,
                       std::shared_ptr<const void> scope)
    : stream_(Stream::pooled(device)), graph_(std::move(graph)), owners_(std::move(owners)), scope_(std::move(scope)) {
  exec_ = drv::GraphExec::instantiate(graph_, device.context(), describe(owners_.size()));
  drv::graph_upload(device.context(), exec_.native_handle(), stream_.get(), describe(owners_.size()));
  stream_.synchronize();
}

GraphState::~GraphState() {
  // The stream's destructor does not wait; replays still in flight must finish before the owners let go of
  // the memory they use. Launches of one graph run in order, so the last replay on another stream finishing
  // means every earlier one has.
  try {
    stream_.synchronize();
    if (launched_elsewhere_ && last_replay_elsewhere_) last_replay_elsewhere_->synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): destructors never throw; nothing better to do
  }
  held_.release_all();
}

void GraphState::order_after_replays_elsewhere() {
  if (replay_elsewhere_pending_) {
    stream_.wait(*last_replay_elsewhere_);
    replay_elsewhere_pending_ = false;
  }
}

void GraphState::hold_no_throw(DeferredRelease::Owners owners) noexcept {
  try {
    held_.hold(stream_, std::move(owners));
    updates_pending_ = true;
  } catch (...) {  // NOLINT(bugprone-empty-catch): hold keeps the owners until release_all when it fails
  }
}

void GraphState::launch_on(const Stream& stream) {
  const std::lock_guard<std::mutex> lock(mutex_);
  CUcontext ctx = exec_.context();
  if (stream.get() == stream_.get()) {
    drv::graph_launch(ctx, exec_.native_handle(), stream_.get(), "CudaGraph");
  } else {
    // Updates queued on the graph's stream come first; later updates wait for this replay (update() makes the
    // graph's stream wait on last_replay_elsewhere_).
    if (updates_pending_) {
      if (!updates_done_) updates_done_.emplace(stream_.device(), false);
      updates_done_->record(stream_);
      stream.wait(*updates_done_);
    }
    drv::graph_launch(ctx, exec_.native_handle(), stream.get(), "CudaGraph");
    if (!last_replay_elsewhere_) last_replay_elsewhere_.emplace(stream_.device(), false);
    last_replay_elsewhere_->record(stream);
    replay_elsewhere_pending_ = true;
    launched_elsewhere_ = true;
  }
  updates_pending_ = false;
  held_.collect();
}

void GraphState::launch_and_wait() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    drv::graph_launch(exec_.context(), exec_.native_handle(), stream_.get(), "CudaGraph");
    updates_pending_ = false;
  }
  stream_.synchronize();
  const std::lock_guard<std::mutex> lock(mutex_);
  held_.collect();
}

std::size_t GraphState::node_count() const { return drv::graph_nodes(graph_.native_handle()).size(); }

std::vector<NodeKind> GraphState::node_kinds() const {
  std::vector<NodeKind> kinds;
  for (CUgraphNode n : drv::graph_nodes(graph_.native_handle())) kinds.push_back(to_kind(drv::graph_node_type(n)));
  return kinds;
}

EdgeCounts GraphState::edge_counts() const {
  const drv::GraphEdgeCounts e = drv::graph_edge_counts(graph_.native_handle());
  return {e.total - e.programmatic, e.programmatic};
}

void GraphState::write_dot(const std::filesystem::path& path) const {
  drv::graph_write_dot(graph_.native_handle(), path.string());
}

}  // namespace detail
}  // namespace lazygraph
