#pragma once
/// \file
/// How a graph is instantiated (GraphOptions), and what re-parameterising one in place reports (UpdateResult).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "lazygraph/graph/graph_pool.hpp"

namespace lazygraph {

/// How a capture treats CUDA calls that are unsafe during capture from other threads (cudaStreamCaptureMode).
enum class CaptureMode {
  this_thread,  ///< unsafe calls from this thread fail (the default)
  global,       ///< unsafe calls from any thread fail
  relaxed,      ///< nothing is checked
};

/// How CudaGraph makes its executable graph.
struct GraphOptions {
  /// For captured graphs: which unsafe calls the capture rejects.
  CaptureMode mode = CaptureMode::this_thread;
  /// Upload the graph to the device when it is instantiated (the first replay then starts at once). When false,
  /// call `upload(stream)` yourself, e.g. on a stream that has time for it; otherwise the first launch uploads.
  bool upload = true;
  /// CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH: memory that the graph's own allocation nodes allocated
  /// and did not free is freed before each relaunch. lazygraph frees the scratch memory it allocates (Scope::scratch)
  /// within the graph; this is for graphs of your own that allocate and do not.
  bool auto_free_on_launch = false;
  /// CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY: kernel nodes run at their own priority attribute rather than
  /// the priority of the stream the graph is launched on.
  bool use_node_priority = false;
  /// The pool whose graphs share scratch memory (Scope::scratch) with this one: it replays on the pool's stream,
  /// and never at the same time as another graph of the pool (graph_pool.hpp). None: a stream of its own.
  std::optional<GraphPool> pool = std::nullopt;
};

/// Whether `update_from` changed the graph, and if not, why.
enum class UpdateStatus {
  applied,             ///< updated in place: the next replay uses the new arguments
  reinstantiated,      ///< did not fit, and UpdateOptions::reinstantiate_on_mismatch made a new executable graph
  topology_changed,    ///< another number of nodes, or other dependencies
  node_type_changed,   ///< a node is of another kind (a copy where a kernel was)
  function_changed,    ///< a kernel node's new function cannot replace the old in place (the driver's rules)
  parameters_changed,  ///< a node's parameters changed in a way the driver cannot update (a memset's width)
  attributes_changed,  ///< a node's attributes changed in a way the driver cannot update
  not_supported,       ///< the driver cannot update this kind of node
};

/// The enumerator's name, e.g. "topology_changed"; never null.
[[nodiscard]] const char* to_string(UpdateStatus status) noexcept;

/// What `update_from` did. On anything but `applied` or `reinstantiated`, the graph is exactly as it was: the
/// previous executable graph keeps replaying the previous arguments.
struct UpdateResult {
  /// What happened.
  UpdateStatus status = UpdateStatus::applied;
  /// The node at which the update was refused, in the order node_kinds() lists the new graph's nodes (empty
  /// when no one node is to blame, e.g. a different node count).
  std::optional<std::size_t> node;
  /// A sentence saying what differs, for logs; empty when applied.
  std::string message;

  /// True when the next replay uses the new op's arguments.
  [[nodiscard]] bool ok() const noexcept {
    return status == UpdateStatus::applied || status == UpdateStatus::reinstantiated;
  }
  /// As ok().
  explicit operator bool() const noexcept { return ok(); }
};

/// Options of `update_from`.
struct UpdateOptions {
  /// When the op does not fit the graph in place, make a new executable graph from it instead of reporting
  /// the mismatch (slower: a whole instantiation; the old one is destroyed once no replay uses it).
  bool reinstantiate_on_mismatch = false;
};

/// What a graph moves between host and device (CudaGraph::transfers): the bytes its pinned staging copies move per
/// replay, and the replays so far. Copies inside conditional bodies are not counted (they may run any number of
/// times per replay).
struct TransferStats {
  /// Host to device, per replay.
  std::size_t bytes_to_device_per_replay = 0;
  /// Device to host, per replay.
  std::size_t bytes_to_host_per_replay = 0;
  /// Replays so far (as replay_count()).
  std::uint64_t replays = 0;
  /// Host to device in all replays so far.
  [[nodiscard]] std::uint64_t bytes_to_device() const noexcept { return bytes_to_device_per_replay * replays; }
  /// Device to host in all replays so far.
  [[nodiscard]] std::uint64_t bytes_to_host() const noexcept { return bytes_to_host_per_replay * replays; }
};

}  // namespace lazygraph
