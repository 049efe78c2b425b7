#pragma once
/// \file
/// NodePlan: an op tree written down as graph nodes and their dependencies, without touching the GPU. An
/// ExecContext in planning mode (CudaGraph::build, CudaGraph::update_from on a built graph) appends one
/// PlannedNode per launch, copy, fill, host call, child graph, event or conditional op (whose bodies are plans
/// of their own, nested in the plan); `>>` becomes a dependency and
/// `all` parallel branches, exactly as stream capture would record them. The graph layer turns a plan into a
/// CUgraph (materialize) or compares two plans and updates an instantiated graph node by node.
///
/// A plan refers to what its ops keep alive (kernels, buffers, child graphs, events): it is valid while the
/// owners collected by the same ExecContext live.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "lazygraph/detail/driver/launch_shape.hpp"

namespace lazygraph::detail {

/// One node of a plan. Only the fields of its `type` are meaningful.
struct PlannedNode {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::uint32_t first_dependency = 0;  ///< into NodePlan::dependencies
  std::uint32_t dependency_count = 0;
  // CU_GRAPH_NODE_TYPE_KERNEL
  CUfunction function = nullptr;
  driver::LaunchShape shape;
  std::uint32_t first_argument = 0;  ///< into NodePlan::argument_offsets (one more entry marks the end)
  std::uint32_t argument_count = 0;
  std::string_view name;  ///< the kernel's (or host call's) name; owned by what the plan's owners keep alive
  // CU_GRAPH_NODE_TYPE_MEMCPY and MEMSET
  CUdeviceptr dst = 0;
  CUdeviceptr src = 0;
  void* host = nullptr;         ///< memcpy with pinned host memory: the host side (`dst` or `src` is then unused)
  bool host_is_source = false;  ///< memcpy with `host`: host to device (else device to host)
  std::size_t bytes = 0;        ///< memcpy: bytes (of each row); memset: elements
  std::size_t rows = 1;         ///< memcpy: rows (a 2-D device-to-device copy when more than one)
  std::size_t dst_pitch = 0;    ///< memcpy of rows: bytes from one row's start to the next in `dst`
  std::size_t src_pitch = 0;    ///< memcpy of rows: the same in `src`
  unsigned pattern = 0;         ///< memset
  unsigned element_size = 0;    ///< memset: 1, 2 or 4
  // CU_GRAPH_NODE_TYPE_HOST
  CUhostFn host_function = nullptr;
  void* host_data = nullptr;
  // CU_GRAPH_NODE_TYPE_GRAPH
  CUgraph child = nullptr;
  // CU_GRAPH_NODE_TYPE_EVENT_RECORD and WAIT_EVENT
  CUevent event = nullptr;
  // CU_GRAPH_NODE_TYPE_CONDITIONAL
  CUgraphConditionalHandle condition = 0;
  CUgraphConditionalNodeType condition_type = CU_GRAPH_COND_TYPE_IF;
  std::uint32_t first_body = 0;  ///< into NodePlan::bodies
  std::uint32_t body_count = 0;
};

/// A condition the plan's graph was made with (Scope::condition in CudaGraph::build): its handle, which kernels
/// take as an argument, belongs to that graph.
struct PlannedCondition {
  CUgraphConditionalHandle handle = 0;
  unsigned default_value = 0;
};

/// Scratch memory of the plan's graph (Scope::scratch in CudaGraph::build): an allocation node added to the graph
/// when the scratch was asked for (its address is fixed from then on); materialize orders every node after it and
/// frees it after them.
struct PlannedScratch {
  CUgraphNode node = nullptr;  ///< the allocation node; null in a plan that could not reuse the graph's scratch
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
};

/// A list of nodes in the order ops submitted them, with their dependencies (indices of earlier nodes) and the
/// bytes of every kernel argument. Plain data: copying or comparing it touches nothing on the GPU.
struct NodePlan {
  CUcontext context = nullptr;
  std::vector<PlannedNode> nodes;
  std::vector<std::uint32_t> dependencies;
  std::vector<std::byte> argument_bytes;
  std::vector<std::uint32_t> argument_offsets;  ///< per kernel: its arguments' offsets, then the end offset
  /// The body graphs of the plan's conditional nodes, each a plan of its own (in the order of the nodes, a node's
  /// bodies in order).
  std::vector<NodePlan> bodies;
  /// The conditions made for the graph (the outermost plan only; bodies use them).
  std::vector<PlannedCondition> conditions;
  /// The scratch memory of the graph (the outermost plan only), in the order it was asked for.
  std::vector<PlannedScratch> scratch;

  /// Reserves room for a plan the size of `other` (an update's plan is the size of the graph's).
  void reserve_like(const NodePlan& other) {
    nodes.reserve(other.nodes.size());
    dependencies.reserve(other.dependencies.size());
    argument_bytes.reserve(other.argument_bytes.size());
    argument_offsets.reserve(other.argument_offsets.size());
  }

  /// The nodes of the plan and of its bodies, at every depth.
  [[nodiscard]] std::size_t total_nodes() const {
    std::size_t n = nodes.size();
    for (const NodePlan& b : bodies) n += b.total_nodes();
    return n;
  }

  /// Appends `node` after `deps`; returns its index.
  std::uint32_t add(PlannedNode node, std::span<const std::uint32_t> deps) {
    node.first_dependency = static_cast<std::uint32_t>(dependencies.size());
    node.dependency_count = static_cast<std::uint32_t>(deps.size());
    dependencies.insert(dependencies.end(), deps.begin(), deps.end());
    nodes.push_back(node);
    return static_cast<std::uint32_t>(nodes.size() - 1);
  }

  /// Copies `count` kernel arguments (`args[i]` points at `sizes[i]` bytes) into the plan; sets `node`'s
  /// argument range.
  void store_arguments(PlannedNode& node, void* const* args, const std::size_t* sizes, std::size_t count) {
    node.first_argument = static_cast<std::uint32_t>(argument_offsets.size());
    node.argument_count = static_cast<std::uint32_t>(count);
    for (std::size_t i = 0; i < count; ++i) {
      // 8-byte aligned, so that the driver reads each value from a naturally aligned address.
      const std::size_t at = (argument_bytes.size() + 7) & ~std::size_t{7};
      argument_bytes.resize(at + sizes[i]);
      std::memcpy(argument_bytes.data() + at, args[i], sizes[i]);
      argument_offsets.push_back(static_cast<std::uint32_t>(at));
    }
    argument_offsets.push_back(static_cast<std::uint32_t>(argument_bytes.size()));
  }

  /// The dependencies of node `i`.
  [[nodiscard]] std::span<const std::uint32_t> dependencies_of(std::size_t i) const {
    const PlannedNode& n = nodes[i];
    return {dependencies.data() + n.first_dependency, n.dependency_count};
  }
  /// The bytes of kernel node `n`'s arguments (with the zero padding between them).
  [[nodiscard]] std::span<const std::byte> arguments(const PlannedNode& n) const {
    const std::uint32_t begin = argument_offsets[n.first_argument];
    const std::uint32_t end = argument_offsets[n.first_argument + n.argument_count];
    return {argument_bytes.data() + begin, static_cast<std::size_t>(end - begin)};
  }
  /// Pointers to each argument of kernel node `n`, as the driver takes them (`out` gets argument_count + 1).
  void argument_pointers(const PlannedNode& n, std::vector<void*>& out) const {
    out.clear();
    for (std::uint32_t a = 0; a < n.argument_count; ++a) {
      out.push_back(const_cast<std::byte*>(argument_bytes.data() + argument_offsets[n.first_argument + a]));
    }
    out.push_back(nullptr);
  }
};

}  // namespace lazygraph::detail
