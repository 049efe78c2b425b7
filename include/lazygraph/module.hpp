#pragma once
/// \file
/// Layer 5, modules: the Module concept and GraphModule, a graph-backed module.

#include "lazygraph/detail/module/host_io.hpp"
#include "lazygraph/detail/module/module.hpp"
#include "lazygraph/graph.hpp"
