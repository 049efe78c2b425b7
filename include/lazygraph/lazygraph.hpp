#pragma once
/// \file
/// Everything in lazygraph, layer by layer: driver, kernels, ops, graph, module.

/// \namespace lazygraph
/// Typed lazy GPU operations recorded into CUDA graphs. Every public name lives here; `lazygraph::detail` is the
/// implementation, left out of this reference, and may change without notice.

#include "lazygraph/driver.hpp"
#include "lazygraph/graph.hpp"
#include "lazygraph/kernels.hpp"
#include "lazygraph/module.hpp"
#include "lazygraph/ops.hpp"
