#pragma once
/// \file
/// Layer 4, graphs: Scope, CudaGraph (capture, build, update_from), DeviceScalar, child graphs, conditions and
/// conditional ops (if_, while_, switch_), scratch memory and graph pools, graph caches, make_graphed, graph options
/// and introspection.

#include "lazygraph/detail/graph/child_graph.hpp"
#include "lazygraph/detail/graph/condition.hpp"
#include "lazygraph/detail/graph/conditional.hpp"
#include "lazygraph/detail/graph/cuda_graph.hpp"
#include "lazygraph/detail/graph/device_scalar.hpp"
#include "lazygraph/detail/graph/graph_build.hpp"
#include "lazygraph/detail/graph/graph_cache.hpp"
#include "lazygraph/detail/graph/graph_options.hpp"
#include "lazygraph/detail/graph/graph_pool.hpp"
#include "lazygraph/detail/graph/graph_state.hpp"
#include "lazygraph/detail/graph/graphed_callable.hpp"
#include "lazygraph/detail/graph/multi_device_graph.hpp"
#include "lazygraph/detail/graph/scope.hpp"
#include "lazygraph/kernels.hpp"
#include "lazygraph/ops.hpp"
