#pragma once
/// \file
/// Layer 2, ops (above the driver): DeviceOp and GraphNode, the primitive ops (copy, fill, value, host_call,
/// record_event/wait_event, and the allocating zeros/ones/empty/dup/from_host) and the combinators `>>`, `all`,
/// `chain`, `map`, `named` and `dataflow`; access sets (accesses_of, with_accesses); profile_kernels. Kernel launches
/// are ops too, but live one layer up, with the kernels (lazygraph/kernels.hpp).

#include "lazygraph/detail/ops/access.hpp"
#include "lazygraph/detail/ops/allocate.hpp"
#include "lazygraph/detail/ops/collective.hpp"
#include "lazygraph/detail/ops/combinators.hpp"
#include "lazygraph/detail/ops/concepts.hpp"
#include "lazygraph/detail/ops/copy.hpp"
#include "lazygraph/detail/ops/dataflow.hpp"
#include "lazygraph/detail/ops/declared_accesses.hpp"
#include "lazygraph/detail/ops/event_ops.hpp"
#include "lazygraph/detail/ops/exec_context.hpp"
#include "lazygraph/detail/ops/fill.hpp"
#include "lazygraph/detail/ops/host_call.hpp"
#include "lazygraph/detail/ops/named.hpp"
#include "lazygraph/detail/ops/node_plan.hpp"
#include "lazygraph/detail/ops/profile.hpp"
