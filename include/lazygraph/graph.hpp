#pragma once
/// \file
/// Layer 4, graphs: Scope, CudaGraph, capture modes and introspection.

#include "lazygraph/detail/graph/cuda_graph.hpp"
#include "lazygraph/detail/graph/graph_state.hpp"
#include "lazygraph/detail/graph/scope.hpp"
#include "lazygraph/kernels.hpp"
#include "lazygraph/ops.hpp"
