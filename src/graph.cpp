#include <string>

#include "lazygraph/detail/driver/capture_state.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/driver/error.hpp"
#include "lazygraph/detail/graph/graph_state.hpp"

namespace lazygraph {

namespace drv = detail::driver;

CaptureStatus capture_status(const Stream& stream) {
  switch (drv::capture_status(stream.get())) {
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

CaptureSession::CaptureSession(const Stream& stream, CaptureMode mode) : stream_(&stream) {
  if (stream.is_capturing()) {
    throw CaptureError(
        "CudaGraph capture: the stream is already capturing a graph; captures do not nest — record "
        "the ops into the outer Scope instead");
  }
  drv::begin_capture(stream.get(), to_driver(mode));
  active_ = true;
  captures_in_progress().fetch_add(1);
}

CaptureSession::~CaptureSession() { abort(); }

void CaptureSession::abort() noexcept {
  if (!active_) return;
  active_ = false;
  captures_in_progress().fetch_sub(1);
  CUgraph graph = nullptr;
  (void)drv::end_capture_no_throw(stream_->get(), &graph);  // ends the capture whatever state it is in
  drv::graph_destroy_no_throw(graph);
}

CUgraph CaptureSession::finish() {
  active_ = false;
  captures_in_progress().fetch_sub(1);
  CUgraph graph = nullptr;
  const CUresult r = drv::end_capture_no_throw(stream_->get(), &graph);
  if (r != CUDA_SUCCESS || graph == nullptr) {
    drv::graph_destroy_no_throw(graph);
    throw CaptureError("CudaGraph capture failed at cuStreamEndCapture with " + drv::result_name(r) +
                       ": a call during the capture was illegal there (a synchronization, an allocation, a module "
                       "load, or work on another stream that was never joined back); record only GraphNode ops "
                       "through Scope::record and do the rest before or after the capture");
  }
  return graph;
}

GraphState::GraphState(const Device& device, CUgraph graph, std::vector<std::shared_ptr<const void>> owners)
    : stream_(Stream::pooled(device)), graph_(graph), owners_(std::move(owners)) {
  try {
    exec_ = drv::graph_instantiate(graph_, "CudaGraph");
    drv::graph_upload(exec_, stream_.get());
    stream_.synchronize();
  } catch (...) {
    drv::graph_exec_destroy_no_throw(exec_);
    drv::graph_destroy_no_throw(graph_);
    throw;
  }
}

GraphState::~GraphState() {
  // The stream's destructor does not wait; replays still in flight must finish before the owners let go of
  // the memory they use.
  try {
    // A replay queued on another stream (launch_on) may still run: wait for the whole device then, since the
    // graph cannot know which of the user's streams are done. Otherwise its own stream suffices.
    if (launched_elsewhere_) {
      stream_.device().synchronize();
    } else {
      stream_.synchronize();
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): destructors never throw; nothing better to do
  }
  drv::graph_exec_destroy_no_throw(exec_);
  drv::graph_destroy_no_throw(graph_);
}

void GraphState::hold_until_next_launch(std::vector<std::shared_ptr<const void>> owners) {
  for (auto& o : owners) pending_.push_back(std::move(o));
  pending_updates_ = true;
}

void GraphState::launch_on(const Stream& stream) {
  if (stream.get() != stream_.get() && pending_updates_) {
    if (!updates_done_) updates_done_.emplace(stream_.device(), false);
    updates_done_->record(stream_);
    stream.wait(*updates_done_);
  }
  if (stream.get() != stream_.get()) launched_elsewhere_ = true;
  drv::graph_launch(exec_, stream.get());
}

void GraphState::launch_and_wait() {
  drv::graph_launch(exec_, stream_.get());
  stream_.synchronize();
  pending_.clear();
  pending_updates_ = false;
}

std::size_t GraphState::node_count() const { return drv::graph_nodes(graph_).size(); }

std::vector<NodeKind> GraphState::node_kinds() const {
  std::vector<NodeKind> kinds;
  for (CUgraphNode n : drv::graph_nodes(graph_)) kinds.push_back(to_kind(drv::graph_node_type(n)));
  return kinds;
}

EdgeCounts GraphState::edge_counts() const {
  const drv::GraphEdgeCounts e = drv::graph_edge_counts(graph_);
  return {e.total - e.programmatic, e.programmatic};
}

void GraphState::write_dot(const std::filesystem::path& path) const { drv::graph_write_dot(graph_, path.string()); }

}  // namespace detail
}  // namespace lazygraph
