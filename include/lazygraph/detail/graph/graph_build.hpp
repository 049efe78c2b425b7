#pragma once
/// \file
/// From a NodePlan to a CUDA graph, and from one plan to another in an instantiated graph: the parts of
/// CudaGraph::build and update_from that talk to the driver.

#include <cuda.h>

#include <optional>
#include <vector>

#include "lazygraph/detail/driver/graph_handle.hpp"
#include "lazygraph/detail/ops/node_plan.hpp"
#include "lazygraph/graph/graph_options.hpp"

namespace lazygraph::detail {

/// Adds every node of `plan` to a new graph, in order, with its dependencies; `nodes` receives the node
/// handles (index i: plan node i; after the plan's own nodes, those of its conditional bodies). A kernel launched
/// early depends programmatically on the kernels before it, as stream capture records it. Not for a plan with
/// conditions, whose handles belong to the graph they were made for (materialize_into that one).
/// \throws CudaError when the driver refuses a node (nothing is leaked).
[[nodiscard]] driver::Graph materialize(const NodePlan& plan, std::vector<CUgraphNode>& nodes);

/// As materialize, into the empty `graph` (the one the plan's conditions were made for). \throws CudaError when
/// the driver refuses a node (the nodes added so far stay in `graph`).
void materialize_into(CUgraph graph, const NodePlan& plan, std::vector<CUgraphNode>& nodes);

/// The first reason `next` cannot replace `current` node for node in an instantiated graph (another node
/// count, kind or dependency; a memset of another element size; other conditions or conditional nodes, or a body
/// that differs so), or nothing when it can. Another kernel
/// function in a kernel node is not a reason: the driver updates it in place, as cuGraphExecUpdate does.
[[nodiscard]] std::optional<UpdateResult> plan_mismatch(const NodePlan& current, const NodePlan& next);

/// True when every conditional node of `plan` (bodies included) is steered by one of the plan's own conditions.
[[nodiscard]] bool conditions_made_for(const NodePlan& plan);

/// Sets, in `exec`, the parameters of every node whose parameters differ between `current` and `next` (which
/// plan_mismatch accepted), conditional bodies included; for a plan with conditions, in the template graph too
/// (such a graph cannot be made again from its plan). All or nothing: when the driver refuses one node, the nodes
/// already set are set back to `current` and the refusal is reported (a CudaError from the driver is rethrown after
/// that). Returns the result and, through `changed`, how many nodes were set.
[[nodiscard]] UpdateResult apply_plan(CUgraphExec exec, const std::vector<CUgraphNode>& nodes, const NodePlan& current,
                                      const NodePlan& next, std::size_t* changed);

}  // namespace lazygraph::detail
