#include "lazygraph/detail/graph/graph_build.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/driver/error.hpp"

namespace lazygraph::detail {

namespace drv = driver;

namespace {

/// The driver's parameters for plan node `n`; `args` holds the kernel argument pointers they refer to.
CUgraphNodeParams node_params(const NodePlan& plan, const PlannedNode& n, std::vector<void*>& args) {
  CUgraphNodeParams p{};
  p.type = n.type;
  switch (n.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      plan.argument_pointers(n, args);
      p.kernel.func = n.function;
      p.kernel.gridDimX = n.shape.grid[0];
      p.kernel.gridDimY = n.shape.grid[1];
      p.kernel.gridDimZ = n.shape.grid[2];
      p.kernel.blockDimX = n.shape.block[0];
      p.kernel.blockDimY = n.shape.block[1];
      p.kernel.blockDimZ = n.shape.block[2];
      p.kernel.sharedMemBytes = n.shape.shared_bytes;
      p.kernel.kernelParams = args.data();
      p.kernel.ctx = plan.context;
      break;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      p.memcpy.copyCtx = plan.context;
      p.memcpy.copyParams.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      p.memcpy.copyParams.srcDevice = n.src;
      p.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      p.memcpy.copyParams.dstDevice = n.dst;
      p.memcpy.copyParams.WidthInBytes = n.bytes;
      p.memcpy.copyParams.Height = 1;
      p.memcpy.copyParams.Depth = 1;
      break;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      p.memset.dst = n.dst;
      p.memset.value = n.pattern;
      p.memset.elementSize = n.element_size;
      p.memset.width = n.bytes;
      p.memset.height = 1;
      p.memset.ctx = plan.context;
      break;
    case CU_GRAPH_NODE_TYPE_HOST:
      p.host.fn = n.host_function;
      p.host.userData = n.host_data;
      break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      p.graph.graph = n.child;
      break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      p.eventRecord.event = n.event;
      break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      p.eventWait.event = n.event;
      break;
    default:
      break;
  }
  return p;
}

const char* kind_name(CUgraphNodeType t) {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return "kernel";
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return "copy";
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return "fill";
    case CU_GRAPH_NODE_TYPE_HOST:
      return "host call";
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return "child graph";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return "event record";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return "event wait";
    default:
      return "empty";
  }
}

std::string describe_node(const PlannedNode& n, std::size_t i) {
  std::string s = "node " + std::to_string(i) + " (" + kind_name(n.type);
  if (!n.name.empty()) s.append(" ").append(n.name);
  return s + ")";
}

/// True when node `i` of both plans would be set to the same parameters.
bool same_parameters(const NodePlan& a, const NodePlan& b, std::size_t i) {
  const PlannedNode& x = a.nodes[i];
  const PlannedNode& y = b.nodes[i];
  switch (x.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const auto xa = a.arguments(x);
      const auto ya = b.arguments(y);
      return x.function == y.function && std::equal(x.shape.grid, x.shape.grid + 3, y.shape.grid) &&
             std::equal(x.shape.block, x.shape.block + 3, y.shape.block) &&
             x.shape.shared_bytes == y.shape.shared_bytes && xa.size() == ya.size() &&
             std::memcmp(xa.data(), ya.data(), xa.size()) == 0;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return x.dst == y.dst && x.src == y.src && x.bytes == y.bytes;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return x.dst == y.dst && x.pattern == y.pattern && x.bytes == y.bytes;
    case CU_GRAPH_NODE_TYPE_HOST:
      return x.host_function == y.host_function && x.host_data == y.host_data;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return x.child == y.child;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return x.event == y.event;
    default:
      return true;
  }
}

}  // namespace

drv::Graph materialize(const NodePlan& plan, std::vector<CUgraphNode>& nodes) {
  drv::Graph graph(drv::graph_create());
  nodes.clear();
  nodes.reserve(plan.nodes.size());
  std::vector<void*> args;
  std::vector<CUgraphNode> deps;
  std::vector<CUgraphEdgeData> edges;
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    const PlannedNode& n = plan.nodes[i];
    deps.clear();
    edges.clear();
    bool programmatic = false;
    for (const std::uint32_t d : plan.dependencies_of(i)) {
      deps.push_back(nodes[d]);
      CUgraphEdgeData e{};
      if (n.type == CU_GRAPH_NODE_TYPE_KERNEL && n.shape.early_launch &&
          plan.nodes[d].type == CU_GRAPH_NODE_TYPE_KERNEL) {
        e.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
        e.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
        programmatic = true;
      }
      edges.push_back(e);
    }
    CUgraphNodeParams p = node_params(plan, n, args);
    nodes.push_back(drv::graph_add_node(graph.native_handle(), deps.data(), programmatic ? edges.data() : nullptr,
                                        deps.size(), &p, n.name.empty() ? kind_name(n.type) : n.name));
  }
  return graph;
}

std::optional<UpdateResult> plan_mismatch(const NodePlan& current, const NodePlan& next) {
  if (current.nodes.size() != next.nodes.size()) {
    return UpdateResult{UpdateStatus::topology_changed, std::nullopt,
                        "the op makes " + std::to_string(next.nodes.size()) + " nodes; the graph has " +
                            std::to_string(current.nodes.size())};
  }
  for (std::size_t i = 0; i < next.nodes.size(); ++i) {
    const PlannedNode& x = current.nodes[i];
    const PlannedNode& y = next.nodes[i];
    if (x.type != y.type) {
      return UpdateResult{UpdateStatus::node_type_changed, i,
                          describe_node(y, i) + " replaces a " + kind_name(x.type) + " node"};
    }
    const auto dx = current.dependencies_of(i);
    const auto dy = next.dependencies_of(i);
    if (!std::equal(dx.begin(), dx.end(), dy.begin(), dy.end()) || x.shape.early_launch != y.shape.early_launch) {
      return UpdateResult{UpdateStatus::topology_changed, i, describe_node(y, i) + " has other dependencies"};
    }
    if (x.type == CU_GRAPH_NODE_TYPE_MEMSET && x.element_size != y.element_size) {
      return UpdateResult{UpdateStatus::parameters_changed, i, describe_node(y, i) + " fills elements of another size"};
    }
  }
  return std::nullopt;
}

UpdateResult apply_plan(CUgraphExec exec, const std::vector<CUgraphNode>& nodes, const NodePlan& current,
                        const NodePlan& next, std::size_t* changed) {
  std::vector<void*> args;
  std::vector<std::size_t> set;
  for (std::size_t i = 0; i < next.nodes.size(); ++i) {
    if (same_parameters(current, next, i)) continue;
    CUgraphNodeParams p = node_params(next, next.nodes[i], args);
    try {
      drv::graph_exec_set_node_params(next.context, exec, nodes[i], &p, "CudaGraph::update_from");
    } catch (const CudaError& e) {
      // Put back what was set, so that the graph replays the previous op's arguments, all of them.
      for (const std::size_t j : set) {
        CUgraphNodeParams back = node_params(current, current.nodes[j], args);
        try {
          drv::graph_exec_set_node_params(current.context, exec, nodes[j], &back, "CudaGraph::update_from");
        } catch (...) {  // NOLINT(bugprone-empty-catch): it was accepted a moment ago with these very parameters
        }
      }
      *changed = 0;
      return UpdateResult{UpdateStatus::parameters_changed, i,
                          describe_node(next.nodes[i], i) + ": the driver refused the new parameters: " + e.what()};
    }
    set.push_back(i);
  }
  *changed = set.size();
  return UpdateResult{};
}

}  // namespace lazygraph::detail
