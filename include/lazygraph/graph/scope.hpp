#pragma once
/// \file
/// Scope: the recorder a capture callback receives. `record` accepts only GraphNodes.
///
/// Why recording is safe: the stream is capturing, so `record` runs no GPU work — each op's launches, copies
/// and fills become graph nodes, in recorded order (and `all` branches become parallel ones). A GraphNode
/// neither allocates nor frees, so no address baked into the graph can be freed or reused behind it, and every
/// buffer a recorded op touches is kept alive by the graph.

#include <cstddef>
#include <type_traits>
#include <utility>

#include "lazygraph/detail/graph/graph_recording.hpp"
#include "lazygraph/driver/device_span.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/graph/condition.hpp"
#include "lazygraph/ops/concepts.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {

template <class T>
class CudaGraph;

/// The recorder a capture callback receives from CudaGraph::scope: `record` turns GraphNode ops into graph
/// nodes. It cannot be copied or moved, and is valid only inside the callback.
class Scope {
 public:
  Scope(const Scope&) = delete;
  Scope(Scope&&) = delete;
  Scope& operator=(const Scope&) = delete;
  Scope& operator=(Scope&&) = delete;
  ~Scope() = default;

  /// Records `op` into the graph and returns its output.
  /// \throws UsageError when called after the capture callback returned.
  template <class Op>
  requires GraphNode<std::remove_cvref_t<Op>>
  typename std::remove_cvref_t<Op>::Output record(Op&& op) {
    if (!open_) [[unlikely]]
      throw_closed();
    if constexpr (!is_buildable_v<std::remove_cvref_t<Op>>) {
      if (ctx_->planning()) throw_not_buildable();
    }
    return std::as_const(op).execute(*ctx_);
  }

  // ---------------------------------------------------------------------------------------------------------
  // READ THIS IF YOUR COMPILE BREAKS HERE: Scope::record takes only GraphNode ops. The static_assert that
  // fails below names the rule your op breaks and what to do instead.
  // ---------------------------------------------------------------------------------------------------------
  /// Anything but a GraphNode: never compiles. The static_assert that fails names the broken rule (not a
  /// DeviceOp, allocates, copies host memory, or did not opt in) and what to do instead.
  template <class Op>
  requires(!GraphNode<std::remove_cvref_t<Op>>) void record(Op&& /*op*/) {
    using O = std::remove_cvref_t<Op>;
    constexpr bool argument_is_device_op = DeviceOp<O>;
    static_assert(argument_is_device_op,
                  "Scope::record accepts only DeviceOp values; this argument is not one (it needs a member type "
                  "Output and a const execute(ExecContext&)); build it from kernel launches, copy, fill or value");
    constexpr bool op_allocates_device_memory = is_allocation_v<O>;
    static_assert(!op_allocates_device_memory,
                  "Scope::record accepts only GraphNode operations; this op (zeros, ones, empty, dup or from_host) "
                  "allocates device memory; allocate it before the scope with .sync_on(stream) and record ops on "
                  "its view()");
    constexpr bool composite_contains_allocation = contains_allocation_v<O>;
    static_assert(!composite_contains_allocation,
                  "Scope::record accepts only GraphNode operations; this composite contains an op that allocates "
                  "device memory (zeros, ones, empty, dup or from_host); allocate before the scope and compose "
                  "ops on views");
    constexpr bool op_transfers_host_memory = is_host_transfer_v<O> || contains_host_transfer_v<O>;
    static_assert(!op_transfers_host_memory,
                  "Scope::record accepts only GraphNode operations; this op copies to or from host memory, which a "
                  "replay would read or write long after; stage inputs with CudaGraph::update(copy(...)) and read "
                  "outputs after launch()");
    constexpr bool op_runs_host_code = runs_host_code_v<O>;
    static_assert(
        already_explained_before_host_code<O>() || !op_runs_host_code,
        "Scope::record accepts only GraphNode operations; this op (or a part of it) is a host_call, which "
        "would run host code on every replay; if that is what you want, record allow_in_graph(host_call(...))");
    // Only for an op none of the rules above explains (one of the user's own that did not opt in).
    constexpr bool already_explained = !argument_is_device_op || op_allocates_device_memory ||
                                       composite_contains_allocation || op_transfers_host_memory || op_runs_host_code;
    static_assert(already_explained || is_graph_node_v<O>,
                  "Scope::record accepts only GraphNode operations; this op does not declare itself one; add "
                  "`static constexpr bool is_graph_node = true;` if it neither allocates, frees nor synchronizes");
  }

  /// A condition of the graph being recorded (captured or built), starting every launch at `default_value`: give it
  /// to kernels that call lg::set_condition and to exactly one if_ / while_ / switch_, at any depth (a condition no
  /// conditional op uses makes recording throw UsageError: CUDA cannot instantiate such a graph). In update_from of
  /// a built graph, the k-th condition made is the graph's k-th (with the same default value). \throws UsageError
  /// after the callback returned, or with a driver older than CUDA 12.4 (naming its version).
  [[nodiscard]] Condition condition(unsigned default_value = 0);

  /// `n` elements of memory that belong to the graph (captured or built): an allocation node before the ops
  /// recorded after this call, a free node after all of them. For intermediate results: the memory is valid only
  /// while the graph runs, holds nothing from one replay to the next (write it before reading it in every replay),
  /// and graphs of one GraphPool share its physical memory. It is never a user allocation: Scope::record stays
  /// allocation-free.
  ///
  /// Misuse is refused where it can be seen: an op that uses the span eagerly (sync_on, CudaGraph::update) or in
  /// another graph throws UsageError. A raw address taken from the span (address(), data()) escapes that check:
  /// using it outside the graph reads or writes memory another graph may own.
  /// \throws UsageError for n == 0, after the callback returned, or inside a conditional body.
  template <class T>
  [[nodiscard]] DeviceSpan<T> scratch(std::size_t n) {
    if (!open_) [[unlikely]]
      throw_closed();
    const detail::ScratchAllocation a = scratch_bytes(n, sizeof(T));
    return DeviceSpan<T>(a.address, n, a.owner);
  }

  /// The stream being captured (for ops you execute by hand; prefer `record`).
  [[nodiscard]] const Stream& stream() const noexcept { return ctx_->stream(); }

 private:
  template <class T>
  friend class CudaGraph;
  explicit Scope(ExecContext& ctx) : ctx_(&ctx) {}
  /// `n` elements of `size` bytes of scratch memory. \throws UsageError when the product overflows.
  detail::ScratchAllocation scratch_bytes(std::size_t n, std::size_t size);
  void close() noexcept { open_ = false; }
  template <class O>
  static constexpr bool already_explained_before_host_code() {
    return !DeviceOp<O> || is_allocation_v<O> || contains_allocation_v<O> || is_host_transfer_v<O> ||
           contains_host_transfer_v<O>;
  }
  [[noreturn]] static void throw_not_buildable() {
    throw UsageError(
        "Scope::record in CudaGraph::build: this op submits work to the stream itself, which only capture can "
        "record; use CudaGraph::scope, or make the op submit through ExecContext and say builds_without_capture");
  }
  [[noreturn]] static void throw_closed() {
    throw UsageError("Scope::record called after the capture callback returned; a Scope lives only inside it");
  }

  ExecContext* ctx_;
  bool open_ = true;
};

}  // namespace lazygraph
