#pragma once
/// \file
/// Layer 3, ops: DeviceOp and GraphNode, the primitive ops (kernel launches, copy, fill, value, and the
/// allocating zeros/ones/empty/dup/from_host) and the combinators `>>`, `all` and `map`.

#include "lazygraph/detail/ops/allocate.hpp"
#include "lazygraph/detail/ops/combinators.hpp"
#include "lazygraph/detail/ops/concepts.hpp"
#include "lazygraph/detail/ops/copy.hpp"
#include "lazygraph/detail/ops/exec_context.hpp"
#include "lazygraph/detail/ops/fill.hpp"
