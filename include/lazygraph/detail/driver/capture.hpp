#pragma once
/// \file
/// Stream capture, in one place: beginning and ending captures, which captures are in progress (by stream,
/// thread and mode), and what they forbid elsewhere. The graph layer's capture session and Stream build on it;
/// nothing else begins or ends a capture.
///
/// Thread safety: every function may be called from any thread.

#include <cuda.h>

#include <string>
#include <string_view>
#include <vector>

namespace lazygraph::detail::driver {

/// Begins capturing `stream` (of context `ctx`) in `mode` and registers the capture as the calling thread's.
/// \throws CudaError when the driver refuses (nothing is registered then).
void capture_begin(CUcontext ctx, CUstream stream, CUstreamCaptureMode mode);

/// As capture_begin, capturing into the existing `graph` (a conditional node's body, which the node owns: the
/// graph capture_end_no_throw returns for it is `graph` itself, not to be destroyed).
void capture_begin_to_graph(CUcontext ctx, CUstream stream, CUgraph graph, CUstreamCaptureMode mode);

/// Ends the capture of `stream` that capture_begin registered and stores its graph in `graph` (null when the
/// capture was invalidated). When no capture of `stream` is registered any more — its Stream was destroyed
/// during the capture, which ended it — returns CUDA_ERROR_STREAM_CAPTURE_UNMATCHED and leaves `graph` null.
CUresult capture_end_no_throw(CUstream stream, CUgraph* graph) noexcept;

/// For a stream about to be destroyed: ends a registered capture of it and destroys what was captured.
/// Returns true when there was one.
bool capture_abandon_no_throw(CUstream stream) noexcept;

/// Adds `params` as a node of the graph `stream` is capturing, after the stream's current work, and makes it
/// what the stream's next work depends on: for node kinds no stream call records (a child graph).
/// \throws CudaError when the stream is not capturing or the driver refuses the node.
void capture_add_node(CUcontext ctx, CUstream stream, CUgraphNodeParams* params, std::string_view object);

/// The graph `stream` is capturing (for conditions, which belong to a graph). \throws CudaError when it is not
/// capturing.
CUgraph capture_graph(CUcontext ctx, CUstream stream);

/// Adds a conditional node (IF, WHILE or SWITCH with `size` bodies, reading `handle`) after the stream's current
/// work, like capture_add_node, and returns its body graphs, which the node owns: fill them, do not destroy them.
std::vector<CUgraph> capture_add_conditional(CUcontext ctx, CUstream stream, CUgraphConditionalHandle handle,
                                             CUgraphConditionalNodeType type, unsigned size);

/// For a stream that joins a fork of a capture it already took part in: makes its next work depend exactly on
/// what `origin`'s next work would. Without this, its dependencies would still include its own last node from
/// the earlier fork (an event wait adds to a capturing stream's dependencies, never replaces them), and the
/// graph would carry an edge that a built graph does not.
void capture_fork_from(CUcontext ctx, CUstream origin, CUstream side);

/// Where a capture stands: the nodes a capturing stream's next work would depend on, with their edge data (empty
/// when every edge is a full dependency).
struct CapturePoint {
  std::vector<CUgraphNode> nodes;
  std::vector<CUgraphEdgeData> edges;  ///< empty, or one per node
  /// Adds `other`'s nodes that this point lacks (a join of two points).
  void merge(const CapturePoint& other);
};
/// What `stream`'s next captured work would depend on. \throws CudaError when it is not capturing.
CapturePoint capture_point(CUcontext ctx, CUstream stream);
/// Makes `stream`'s next captured work depend on exactly `point`'s nodes (dataflow's branches start from the
/// ends of the work they follow). \throws CudaError when it is not capturing.
void capture_resume_from(CUcontext ctx, CUstream stream, const CapturePoint& point);

/// True while a capture of `stream` begun by capture_begin has not ended.
[[nodiscard]] bool capture_registered(CUstream stream) noexcept;

/// Why loading a module now, from the calling thread, would break a capture: a capture begun on this thread
/// is in progress, or a global-mode capture on any thread. Empty when loading is safe. (A capture in
/// this-thread or relaxed mode on another thread does not forbid it.)
[[nodiscard]] std::string module_load_forbidden_reason();

}  // namespace lazygraph::detail::driver
