#pragma once
/// \file
/// Everything in lazygraph, layer by layer: driver, kernels, ops, graph, module.

#include "lazygraph/driver.hpp"
#include "lazygraph/graph.hpp"
#include "lazygraph/kernels.hpp"
#include "lazygraph/module.hpp"
#include "lazygraph/ops.hpp"
