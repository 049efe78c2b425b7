#pragma once
/// \file
/// Layer 5, modules: the Module concept; GraphModule, a graph-backed module; BucketedModule, one graph per bucket
/// of a run-time row count.

#include "lazygraph/graph.hpp"
#include "lazygraph/module/bucketed_module.hpp"
#include "lazygraph/module/host_io.hpp"
#include "lazygraph/module/module.hpp"
