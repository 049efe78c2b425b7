#pragma once
/// \file
/// Layer 4, graphs: Scope, CudaGraph (capture, build, update_from), DeviceScalar, child graphs, conditions and
/// conditional ops (if_, while_, switch_), scratch memory and graph pools, graph caches, make_graphed, graph options
/// and introspection.

#include "lazygraph/graph/child_graph.hpp"
#include "lazygraph/graph/condition.hpp"
#include "lazygraph/graph/conditional.hpp"
#include "lazygraph/graph/cuda_graph.hpp"
#include "lazygraph/graph/device_scalar.hpp"
#include "lazygraph/graph/graph_cache.hpp"
#include "lazygraph/graph/graph_options.hpp"
#include "lazygraph/graph/graph_pool.hpp"
#include "lazygraph/graph/graphed_callable.hpp"
#include "lazygraph/graph/multi_device_graph.hpp"
#include "lazygraph/graph/node_kind.hpp"
#include "lazygraph/graph/scope.hpp"
#include "lazygraph/kernels.hpp"
#include "lazygraph/ops.hpp"
