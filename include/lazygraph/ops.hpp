#pragma once
/// \file
/// Layer 2, ops (above the driver): DeviceOp and GraphNode, the primitive ops (copy, fill, value, host_call,
/// record_event/wait_event, and the allocating zeros/ones/empty/dup/from_host) and the combinators `>>`, `all`,
/// `chain`, `map`, `named` and `dataflow`; access sets (accesses_of, with_accesses); profile_kernels. Kernel launches
/// are ops too, but live one layer up, with the kernels (lazygraph/kernels.hpp).

#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/allocate.hpp"
#include "lazygraph/ops/any_op.hpp"
#include "lazygraph/ops/collective.hpp"
#include "lazygraph/ops/collective_log.hpp"
#include "lazygraph/ops/combinators.hpp"
#include "lazygraph/ops/concepts.hpp"
#include "lazygraph/ops/copy.hpp"
#include "lazygraph/ops/dataflow.hpp"
#include "lazygraph/ops/declared_accesses.hpp"
#include "lazygraph/ops/event_ops.hpp"
#include "lazygraph/ops/exec_context.hpp"
#include "lazygraph/ops/fill.hpp"
#include "lazygraph/ops/host_call.hpp"
#include "lazygraph/ops/named.hpp"
#include "lazygraph/ops/profile.hpp"
