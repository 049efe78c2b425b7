#include "lazygraph/detail/graph/graph_build.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"

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
      if (n.host != nullptr && n.host_is_source) {
        p.memcpy.copyParams.srcMemoryType = CU_MEMORYTYPE_HOST;
        p.memcpy.copyParams.srcHost = n.host;
        p.memcpy.copyParams.srcDevice = 0;
      } else if (n.host != nullptr) {
        p.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_HOST;
        p.memcpy.copyParams.dstHost = n.host;
        p.memcpy.copyParams.dstDevice = 0;
      }
      p.memcpy.copyParams.WidthInBytes = n.bytes;
      p.memcpy.copyParams.Height = n.rows;
      p.memcpy.copyParams.srcPitch = n.src_pitch;
      p.memcpy.copyParams.dstPitch = n.dst_pitch;
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
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      p.conditional.handle = n.condition;
      p.conditional.type = n.condition_type;
      p.conditional.size = n.body_count;
      p.conditional.ctx = plan.context;
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
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return "conditional";
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
      return x.dst == y.dst && x.src == y.src && x.host == y.host && x.host_is_source == y.host_is_source &&
             x.bytes == y.bytes && x.rows == y.rows && x.dst_pitch == y.dst_pitch && x.src_pitch == y.src_pitch;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return x.dst == y.dst && x.pattern == y.pattern && x.bytes == y.bytes;
    case CU_GRAPH_NODE_TYPE_HOST:
      return x.host_function == y.host_function && x.host_data == y.host_data;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return x.child == y.child;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return x.event == y.event;
    default:  // empty and conditional nodes: plan_mismatch compared what a conditional node has (its bodies apart)
      return true;
  }
}

/// Adds the nodes of `plan` to `graph` and appends their handles to `nodes`: first the plan's own nodes, then
/// each conditional node's bodies in order, laid out the same way (collect_changes walks the same order).
void add_nodes(CUgraph graph, const NodePlan& plan, std::vector<CUgraphNode>& nodes,
               std::span<const CUgraphNode> after = {}) {
  const std::size_t base = nodes.size();
  std::vector<void*> args;
  std::vector<CUgraphNode> deps;
  std::vector<CUgraphEdgeData> edges;
  std::vector<CUgraph> body_graphs(plan.bodies.size());
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    const PlannedNode& n = plan.nodes[i];
    deps.clear();
    edges.clear();
    bool programmatic = false;
    for (const std::uint32_t d : plan.dependencies_of(i)) {
      deps.push_back(nodes[base + d]);
      CUgraphEdgeData e{};
      if (n.type == CU_GRAPH_NODE_TYPE_KERNEL && n.shape.early_launch &&
          plan.nodes[d].type == CU_GRAPH_NODE_TYPE_KERNEL) {
        e.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
        e.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
        programmatic = true;
      }
      edges.push_back(e);
    }
    if (n.dependency_count == 0) deps.assign(after.begin(), after.end());  // the scratch allocations come first
    CUgraphNodeParams p = node_params(plan, n, args);
    nodes.push_back(drv::graph_add_node(graph, deps.data(), programmatic ? edges.data() : nullptr, deps.size(), &p,
                                        n.name.empty() ? kind_name(n.type) : n.name));
    if (n.type == CU_GRAPH_NODE_TYPE_KERNEL) {
      drv::graph_kernel_node_set_attributes(nodes.back(), n.shape, n.name.empty() ? kind_name(n.type) : n.name);
    }
    if (n.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      std::copy_n(p.conditional.phGraph_out, n.body_count, body_graphs.begin() + n.first_body);
    }
  }
  for (std::size_t b = 0; b < plan.bodies.size(); ++b) add_nodes(body_graphs[b], plan.bodies[b], nodes);
}

/// The first reason `next` cannot replace `current` (see plan_mismatch); `where` prefixes messages inside bodies,
/// and `node` is the outermost node a mismatch is reported at.
std::optional<UpdateResult> first_mismatch(const NodePlan& current, const NodePlan& next, const std::string& where,
                                           std::optional<std::size_t> outer) {
  const auto at = [&](std::size_t i) { return outer ? outer : std::optional<std::size_t>(i); };
  if (current.nodes.size() != next.nodes.size()) {
    return UpdateResult{UpdateStatus::topology_changed, outer,
                        where + "the op makes " + std::to_string(next.nodes.size()) + " nodes; the graph has " +
                            std::to_string(current.nodes.size())};
  }
  for (std::size_t i = 0; i < next.nodes.size(); ++i) {
    const PlannedNode& x = current.nodes[i];
    const PlannedNode& y = next.nodes[i];
    if (x.type != y.type) {
      return UpdateResult{UpdateStatus::node_type_changed, at(i),
                          where + describe_node(y, i) + " replaces a " + kind_name(x.type) + " node"};
    }
    const auto dx = current.dependencies_of(i);
    const auto dy = next.dependencies_of(i);
    if (!std::equal(dx.begin(), dx.end(), dy.begin(), dy.end()) || x.shape.early_launch != y.shape.early_launch) {
      return UpdateResult{UpdateStatus::topology_changed, at(i),
                          where + describe_node(y, i) + " has other dependencies"};
    }
    // A kernel node's clusters and carveout are attributes, which an update of its parameters would keep: a change
    // needs a new graph.
    if (!std::equal(x.shape.cluster, x.shape.cluster + 3, y.shape.cluster)) {
      return UpdateResult{UpdateStatus::parameters_changed, at(i),
                          where + describe_node(y, i) + " launches its blocks in other clusters"};
    }
    if (x.shape.carveout != y.shape.carveout) {
      return UpdateResult{UpdateStatus::parameters_changed, at(i),
                          where + describe_node(y, i) + " prefers another shared memory carveout"};
    }
    // Another child graph: its kernels' clusters and carveouts, which setting the node's parameters would not change
    // (the topology, cuGraphExecChildGraphNodeSetParams's to refuse).
    if (x.type == CU_GRAPH_NODE_TYPE_GRAPH && x.child != y.child) {
      const auto now = drv::graph_kernel_attributes(x.child);
      const auto then = drv::graph_kernel_attributes(y.child);
      if (now.size() == then.size() && now != then) {
        return UpdateResult{UpdateStatus::parameters_changed, at(i),
                            where + describe_node(y, i) +
                                " holds a kernel that launches in other clusters or prefers another shared memory "
                                "carveout"};
      }
    }
    if (x.type == CU_GRAPH_NODE_TYPE_MEMCPY &&
        ((x.host != nullptr) != (y.host != nullptr) || x.host_is_source != y.host_is_source)) {
      return UpdateResult{UpdateStatus::parameters_changed, at(i),
                          where + describe_node(y, i) + " copies in another direction"};
    }
    if (x.type == CU_GRAPH_NODE_TYPE_MEMSET && x.element_size != y.element_size) {
      return UpdateResult{UpdateStatus::parameters_changed, at(i),
                          where + describe_node(y, i) + " fills elements of another size"};
    }
    if (x.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      if (x.condition_type != y.condition_type || x.body_count != y.body_count) {
        return UpdateResult{UpdateStatus::topology_changed, at(i),
                            where + describe_node(y, i) + " is another kind of conditional node"};
      }
      if (x.condition != y.condition) {
        return UpdateResult{UpdateStatus::parameters_changed, at(i),
                            where + describe_node(y, i) + " is steered by another condition"};
      }
      for (std::uint32_t b = 0; b < x.body_count; ++b) {
        if (auto m = first_mismatch(current.bodies[x.first_body + b], next.bodies[y.first_body + b],
                                    where + describe_node(y, i) + ", body " + std::to_string(b) + ": ", at(i))) {
          return m;
        }
      }
    }
  }
  return std::nullopt;
}

/// A node whose parameters change: where it is in both plans, and its handle.
struct Change {
  const NodePlan* current;
  const NodePlan* next;
  std::size_t index;
  CUgraphNode node;
};

/// Appends the nodes whose parameters differ between `current` and `next` (which mismatch accepted), walking the
/// node handles in add_nodes' order from `*cursor`.
void collect_changes(const NodePlan& current, const NodePlan& next, const std::vector<CUgraphNode>& nodes,
                     std::size_t* cursor, std::vector<Change>& out) {
  const std::size_t base = *cursor;
  *cursor += next.nodes.size();
  for (std::size_t i = 0; i < next.nodes.size(); ++i) {
    if (!same_parameters(current, next, i)) out.push_back({&current, &next, i, nodes[base + i]});
  }
  for (std::size_t b = 0; b < next.bodies.size(); ++b) {
    collect_changes(current.bodies[b], next.bodies[b], nodes, cursor, out);
  }
}

}  // namespace

drv::Graph materialize(const NodePlan& plan, std::vector<CUgraphNode>& nodes) {
  drv::Graph graph(drv::graph_create());
  materialize_into(graph.native_handle(), plan, nodes);
  return graph;
}

void materialize_into(CUgraph graph, const NodePlan& plan, std::vector<CUgraphNode>& nodes) {
  nodes.clear();
  nodes.reserve(plan.total_nodes());
  std::vector<CUgraphNode> allocations;
  for (const PlannedScratch& m : plan.scratch) allocations.push_back(m.node);
  add_nodes(graph, plan, nodes, allocations);
  if (plan.scratch.empty()) return;
  // Every scratch allocation is freed after the plan's last nodes (those no other node depends on).
  std::vector<bool> depended_on(plan.nodes.size(), false);
  for (const std::uint32_t d : plan.dependencies) depended_on[d] = true;
  std::vector<CUgraphNode> last;
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    if (!depended_on[i]) last.push_back(nodes[i]);
  }
  if (last.empty()) last = allocations;
  for (const PlannedScratch& m : plan.scratch) {
    CUgraphNodeParams p{};
    p.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    p.free.dptr = m.address;
    (void)drv::graph_add_node(graph, last.data(), nullptr, last.size(), &p, "scratch");
  }
}

std::optional<UpdateResult> plan_mismatch(const NodePlan& current, const NodePlan& next) {
  if (current.conditions.size() != next.conditions.size()) {
    return UpdateResult{UpdateStatus::topology_changed, std::nullopt,
                        "the op makes " + std::to_string(next.conditions.size()) + " conditions; the graph has " +
                            std::to_string(current.conditions.size())};
  }
  for (std::size_t k = 0; k < next.conditions.size(); ++k) {
    if (current.conditions[k].default_value != next.conditions[k].default_value) {
      return UpdateResult{UpdateStatus::parameters_changed, std::nullopt,
                          "condition " + std::to_string(k) + " starts at " +
                              std::to_string(next.conditions[k].default_value) + "; the graph's starts at " +
                              std::to_string(current.conditions[k].default_value)};
    }
  }
  if (current.scratch.size() != next.scratch.size()) {
    return UpdateResult{UpdateStatus::topology_changed, std::nullopt,
                        "the op asks for scratch memory " + std::to_string(next.scratch.size()) +
                            " time(s); the graph has " + std::to_string(current.scratch.size())};
  }
  for (std::size_t k = 0; k < next.scratch.size(); ++k) {
    if (current.scratch[k].bytes != next.scratch[k].bytes || current.scratch[k].node != next.scratch[k].node) {
      return UpdateResult{UpdateStatus::parameters_changed, std::nullopt,
                          "scratch " + std::to_string(k) + " has " + std::to_string(next.scratch[k].bytes) +
                              " bytes; the graph's has " + std::to_string(current.scratch[k].bytes)};
    }
  }
  return first_mismatch(current, next, "", std::nullopt);
}

namespace {
bool steered_by(const NodePlan& plan, const std::vector<PlannedCondition>& conditions) {
  for (const PlannedNode& n : plan.nodes) {
    if (n.type == CU_GRAPH_NODE_TYPE_CONDITIONAL &&
        std::none_of(conditions.begin(), conditions.end(),
                     [&](const PlannedCondition& c) { return c.handle == n.condition; })) {
      return false;
    }
  }
  return std::all_of(plan.bodies.begin(), plan.bodies.end(),
                     [&](const NodePlan& b) { return steered_by(b, conditions); });
}
}  // namespace

bool conditions_made_for(const NodePlan& plan) { return steered_by(plan, plan.conditions); }

UpdateResult apply_plan(CUgraphExec exec, const std::vector<CUgraphNode>& nodes, const NodePlan& current,
                        const NodePlan& next, std::size_t* changed) {
  std::vector<Change> changes;
  std::size_t cursor = 0;
  collect_changes(current, next, nodes, &cursor, changes);
  // A graph with conditions cannot be made again from its plan (the conditions belong to it): its template is
  // kept up to date instead, node by node, as the executable graph is.
  const bool in_template = !next.conditions.empty() || !next.scratch.empty();
  std::vector<void*> args;
  std::size_t set = 0;
  for (; set < changes.size(); ++set) {
    const Change& c = changes[set];
    CUgraphNodeParams p = node_params(*c.next, c.next->nodes[c.index], args);
    try {
      drv::graph_exec_set_node_params(next.context, exec, c.node, &p, "CudaGraph::update_from");
      if (in_template) {
        p = node_params(*c.next, c.next->nodes[c.index], args);
        drv::graph_node_set_params(c.node, &p, "CudaGraph::update_from");
      }
    } catch (const CudaError& e) {
      // Put back what was set, so that the graph replays the previous op's arguments, all of them (this node's
      // too: its template may have been refused after the executable graph took it).
      for (std::size_t j = 0; j <= set; ++j) {
        const Change& back_to = changes[j];
        CUgraphNodeParams back = node_params(*back_to.current, back_to.current->nodes[back_to.index], args);
        try {
          drv::graph_exec_set_node_params(current.context, exec, back_to.node, &back, "CudaGraph::update_from");
          if (in_template) {
            back = node_params(*back_to.current, back_to.current->nodes[back_to.index], args);
            drv::graph_node_set_params(back_to.node, &back, "CudaGraph::update_from");
          }
        } catch (...) {  // NOLINT(bugprone-empty-catch): it was accepted before with these very parameters
        }
      }
      *changed = 0;
      const std::optional<std::size_t> i = c.current == &current ? std::optional<std::size_t>(c.index) : std::nullopt;
      return UpdateResult{UpdateStatus::parameters_changed, i,
                          describe_node(c.next->nodes[c.index], c.index) +
                              (c.current == &current ? "" : " of a conditional body") +
                              ": the driver refused the new parameters: " + e.what()};
    }
  }
  *changed = set;
  return UpdateResult{};
}

}  // namespace lazygraph::detail
