#include "lazygraph/detail/driver/capture.hpp"

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "lazygraph/detail/driver/driver_api.hpp"

namespace lazygraph::detail::driver {

namespace {

struct ActiveCapture {
  CUstream stream;
  CUcontext context;
  CUstreamCaptureMode mode;
  std::thread::id thread;
  bool new_graph = true;  ///< false when capturing into an existing graph (capture_begin_to_graph)
};

/// The captures in progress. A handful at most, so a vector under one lock.
class Registry {
 public:
  void add(const ActiveCapture& c) {
    const std::lock_guard<std::mutex> lock(mutex_);
    active_.push_back(c);
  }
  /// Removes the capture of `stream`, returning it; false when there is none.
  bool take(CUstream stream, ActiveCapture* out) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it =
        std::find_if(active_.begin(), active_.end(), [&](const ActiveCapture& c) { return c.stream == stream; });
    if (it == active_.end()) return false;
    *out = *it;
    active_.erase(it);
    return true;
  }
  bool contains(CUstream stream) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    return std::any_of(active_.begin(), active_.end(), [&](const ActiveCapture& c) { return c.stream == stream; });
  }
  std::string forbidden_reason() {
    const std::lock_guard<std::mutex> lock(mutex_);
    const std::thread::id me = std::this_thread::get_id();
    for (const ActiveCapture& c : active_) {
      if (c.thread == me) return "a graph capture is in progress on this thread";
      if (c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL)
        return "a global-mode graph capture is in progress on another thread";
    }
    return {};
  }

 private:
  std::mutex mutex_;
  std::vector<ActiveCapture> active_;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void capture_begin(CUcontext ctx, CUstream stream, CUstreamCaptureMode mode) {
  begin_capture(ctx, stream, mode);
  try {
    registry().add({stream, ctx, mode, std::this_thread::get_id()});
  } catch (...) {
    CUgraph graph = nullptr;
    (void)end_capture_no_throw(ctx, stream, &graph);
    graph_destroy_no_throw(graph);
    throw;
  }
}

void capture_begin_to_graph(CUcontext ctx, CUstream stream, CUgraph graph, CUstreamCaptureMode mode) {
  begin_capture_to_graph(ctx, stream, graph, mode);
  try {
    registry().add({stream, ctx, mode, std::this_thread::get_id(), false});
  } catch (...) {
    CUgraph same = nullptr;
    (void)end_capture_no_throw(ctx, stream, &same, false);  // `graph` itself: its owner destroys it
    throw;
  }
}

CUresult capture_end_no_throw(CUstream stream, CUgraph* graph) noexcept {
  *graph = nullptr;
  ActiveCapture c{};
  if (!registry().take(stream, &c)) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  return end_capture_no_throw(c.context, stream, graph, c.new_graph);
}

bool capture_abandon_no_throw(CUstream stream) noexcept {
  CUgraph graph = nullptr;
  ActiveCapture c{};
  if (!registry().take(stream, &c)) return false;
  (void)end_capture_no_throw(c.context, stream, &graph, c.new_graph);
  if (c.new_graph) graph_destroy_no_throw(graph);
  return true;
}

void capture_add_node(CUcontext ctx, CUstream stream, CUgraphNodeParams* params, std::string_view object) {
  const CaptureFrontier f = capture_frontier(ctx, stream);
  CUgraphNode node = graph_add_node(f.graph, f.dependencies.data(), f.edges.empty() ? nullptr : f.edges.data(),
                                    f.dependencies.size(), params, object);
  capture_set_frontier(ctx, stream, &node, nullptr, 1);
}

CUgraph capture_graph(CUcontext ctx, CUstream stream) { return capture_frontier(ctx, stream).graph; }

std::vector<CUgraph> capture_add_conditional(CUcontext ctx, CUstream stream, CUgraphConditionalHandle handle,
                                             CUgraphConditionalNodeType type, unsigned size) {
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  params.conditional.handle = handle;
  params.conditional.type = type;
  params.conditional.size = size;
  params.conditional.ctx = ctx;
  capture_add_node(ctx, stream, &params, "conditional node");
  return {params.conditional.phGraph_out, params.conditional.phGraph_out + size};
}

void capture_fork_from(CUcontext ctx, CUstream origin, CUstream side) {
  const CaptureFrontier f = capture_frontier(ctx, origin);
  capture_set_frontier(ctx, side, f.dependencies.data(), f.edges.empty() ? nullptr : f.edges.data(),
                       f.dependencies.size());
}

void CapturePoint::merge(const CapturePoint& other) {
  for (std::size_t i = 0; i < other.nodes.size(); ++i) {
    if (std::find(nodes.begin(), nodes.end(), other.nodes[i]) != nodes.end()) continue;
    if (!other.edges.empty() && edges.empty()) edges.resize(nodes.size());  // zeroed: full dependencies
    nodes.push_back(other.nodes[i]);
    if (!edges.empty()) edges.push_back(other.edges.empty() ? CUgraphEdgeData{} : other.edges[i]);
  }
}

CapturePoint capture_point(CUcontext ctx, CUstream stream) {
  CaptureFrontier f = capture_frontier(ctx, stream);
  return {std::move(f.dependencies), std::move(f.edges)};
}

void capture_resume_from(CUcontext ctx, CUstream stream, const CapturePoint& point) {
  capture_set_frontier(ctx, stream, point.nodes.data(), point.edges.empty() ? nullptr : point.edges.data(),
                       point.nodes.size());
}

bool capture_registered(CUstream stream) noexcept { return registry().contains(stream); }

std::string module_load_forbidden_reason() { return registry().forbidden_reason(); }

}  // namespace lazygraph::detail::driver
