#pragma once
/// \file
/// Layer 5, modules: the Module concept; GraphModule, a graph-backed module; BucketedModule, one graph per bucket
/// of a run-time row count.

#include "lazygraph/detail/module/bucketed_module.hpp"
#include "lazygraph/detail/module/host_io.hpp"
#include "lazygraph/detail/module/module.hpp"
#include "lazygraph/graph.hpp"
