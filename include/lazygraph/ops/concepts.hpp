#pragma once
/// \file
/// The two concepts of the op layer, and the base every op derives from.
///
/// A DeviceOp is a value that describes GPU work: it has a member type `Output` and a const
/// `execute(ExecContext&)` returning it. Building one never touches the GPU; executing it submits the work.
///
/// A GraphNode is a DeviceOp that may be recorded into a graph. It opts in explicitly with
/// `static constexpr bool is_graph_node = true;` — and does so only when it neither allocates nor frees device
/// memory, nor makes the host wait, nor reads host memory that may change between replays. Allocating ops say
/// `allocates_device_memory = true` instead; copies from or to host memory say `transfers_host_memory = true`.
/// A composite is a GraphNode exactly when all of its parts are, and says what its parts contain, so a
/// rejected recording can be explained in one sentence.

#include <concepts>
#include <optional>
#include <type_traits>
#include <utility>

#include "lazygraph/driver/stream.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {

/// A value that describes GPU work: a member type `Output` and a const `execute(ExecContext&)` returning it.
/// Building one runs nothing; `sync_on(stream)` (from OpBase) runs it, Scope::record records it.
template <class Op>
concept DeviceOp = requires(const Op& op, ExecContext& ctx) {
  typename Op::Output;
  { op.execute(ctx) } -> std::same_as<typename Op::Output>;
};

/// The named properties the diagnostics test, so the failing term shows in a compiler error.
template <class Op>
inline constexpr bool is_graph_node_v = requires {
  requires Op::is_graph_node;
};
/// True for an op that allocates device memory (says `allocates_device_memory = true`: zeros, ones, ...).
template <class Op>
inline constexpr bool is_allocation_v = requires {
  requires Op::allocates_device_memory;
};
/// True for an op that reads or writes host memory (says `transfers_host_memory = true`: host copies).
template <class Op>
inline constexpr bool is_host_transfer_v = requires {
  requires Op::transfers_host_memory;
};
/// True for a composite with an allocating op among its parts.
template <class Op>
inline constexpr bool contains_allocation_v = requires {
  requires Op::contains_allocation;
};
/// True for a composite with a host copy among its parts.
template <class Op>
inline constexpr bool contains_host_transfer_v = requires {
  requires Op::contains_host_transfer;
};

/// True for an op that submits its work only through the ExecContext's launch, copy, fill, host_function,
/// child_graph and event calls (says `builds_without_capture = true`), so that CudaGraph::build can write it
/// down as nodes. An op that submits to `ctx.stream()` itself can only be captured.
template <class Op>
inline constexpr bool is_buildable_v = requires {
  requires Op::builds_without_capture;
};
/// True for an op that runs host code when the stream or graph reaches it (host_call), which is a GraphNode
/// only once wrapped in allow_in_graph.
template <class Op>
inline constexpr bool runs_host_code_v = requires {
  requires Op::runs_host_code;
};

/// A DeviceOp that Scope::record accepts: it says `static constexpr bool is_graph_node = true`, which an op may
/// say only when it neither allocates nor frees device memory, nor synchronizes, nor touches host memory. Not
/// checked beyond that flag: an op of your own that lies about it breaks the graph's guarantees.
template <class Op>
concept GraphNode = DeviceOp<Op> && is_graph_node_v<Op>;

/// A GraphNode that CudaGraph::build can add as nodes without capturing a stream (see is_buildable_v). Every
/// op of lazygraph's is one but a GEMM's (GemmOp: cuBLASLt submits to the stream itself), which is captured only;
/// an op of your own becomes one by submitting through the ExecContext and saying
/// `static constexpr bool builds_without_capture = true;`.
template <class Op>
concept BuildableNode = GraphNode<Op> && is_buildable_v<Op>;

namespace detail {

template <class... Ops>
inline constexpr bool all_graph_nodes = (is_graph_node_v<Ops> && ...);
template <class... Ops>
inline constexpr bool any_allocation = ((is_allocation_v<Ops> || contains_allocation_v<Ops>) || ...);
template <class... Ops>
inline constexpr bool any_host_transfer = ((is_host_transfer_v<Ops> || contains_host_transfer_v<Ops>) || ...);
template <class... Ops>
inline constexpr bool all_buildable = (is_buildable_v<Ops> && ...);
template <class... Ops>
inline constexpr bool any_host_code = (runs_host_code_v<Ops> || ...);

/// Executes `op` on `stream` and waits for it.
template <class Op>
typename Op::Output run_and_wait(const Op& op, const Stream& stream) {
  ExecContext ctx(stream, false);
  // When the op throws after submitting part of its work, that work (a host call's record, say) still uses
  // what the context keeps: wait for it before the context lets go.
  const auto wait_then_rethrow = [&] {
    try {
      stream.synchronize();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the op's own exception is the one to report
    }
    throw;
  };
  if constexpr (std::is_void_v<typename Op::Output>) {
    try {
      op.execute(ctx);
    } catch (...) {
      wait_then_rethrow();
    }
    stream.synchronize();
    ctx.rethrow_host_errors();
  } else {
    std::optional<typename Op::Output> out;
    try {
      out.emplace(op.execute(ctx));
    } catch (...) {
      wait_then_rethrow();
    }
    stream.synchronize();
    ctx.rethrow_host_errors();
    return std::move(*out);
  }
}

}  // namespace detail

/// The base of lazygraph's ops (CRTP): gives every op `sync_on`. Your own ops may derive from it too.
template <class Derived>
class OpBase {
 public:
  /// Runs the op eagerly on `stream`, waits for it, and returns its output.
  /// \throws CaptureError when `stream` is capturing a graph (record the op in the Scope instead).
  auto sync_on(const Stream& stream) const { return detail::run_and_wait(static_cast<const Derived&>(*this), stream); }
};

}  // namespace lazygraph
