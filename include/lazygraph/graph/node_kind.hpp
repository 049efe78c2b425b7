#pragma once
/// \file
/// What CudaGraph's introspection (node_kinds(), edge_counts()) reports: the kind of each node of a recorded graph,
/// and how many of its dependencies are full or programmatic.

#include <cstddef>

namespace lazygraph {

/// The kind of one node of a recorded graph (captured or built).
enum class NodeKind { kernel, memcpy, memset, host, child_graph, empty, wait_event, event_record, other };
/// \var NodeKind::kernel
/// A kernel launch.
/// \var NodeKind::memcpy
/// A copy (`copy`, device to device).
/// \var NodeKind::memset
/// A fill (`fill`).
/// \var NodeKind::host
/// A host function call (`allow_in_graph(host_call(...))`).
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

/// The enumerator's name, e.g. "child_graph"; never null.
[[nodiscard]] const char* to_string(NodeKind kind) noexcept;

}  // namespace lazygraph
