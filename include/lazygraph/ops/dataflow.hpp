#pragma once
/// \file
/// dataflow(op1, op2, ...): ops in program order, ordered only where they conflict. Op j follows op i (i < j)
/// when j reads bytes i writes (read-after-write), writes bytes i reads (write-after-read) or writes bytes i
/// writes (write-after-write), as their access sets say (access.hpp); the rest become parallel branches when
/// recorded. The results are those of running the ops one after another — without a hand-written all(...), and
/// without the races a wrong all(...) has.
///
/// The order is worked out when the op is built, from the spans the ops hold (an op's spans cannot change after).
/// Only the direct orderings are kept (op 3 after op 2 after op 1 gives no edge from 1 to 3), and an op that would
/// wait for several ops, the latest of which already waits for several (a join), waits for that one alone, which
/// takes the others in: one join instead of two, since each join ends a chain of early-launched kernels (about
/// 1-2 us on an H100; measured on the unfused decoder, bench_models). That orders more, never less. An op that cannot
/// say what it touches (opaque: a host call, an event, a conditional, a child graph, join(), an op of your own
/// without `accesses`) is ordered after everything before it and before everything after it. Each op is one
/// unit: a composite's parts keep their own order (`a >> b` inside dataflow stays a then b).
///
/// Eagerly (`sync_on`) the ops run one after another on the stream; the parallelism is the graph's.

#include <array>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/combinators.hpp"
#include "lazygraph/ops/concepts.hpp"

namespace lazygraph {

/// Ops ordered by what they read and write (see the file comment). A GraphNode when every op is.
template <DeviceOp... Ops>
class [[nodiscard]] DataflowOp : public OpBase<DataflowOp<Ops...>>, public detail::CompositeTraits<Ops...> {
  static_assert(sizeof...(Ops) >= 1, "dataflow(): give it at least one op");

 public:
  /// A tuple of the ops' outputs in order (Unit for a void one), or void when every output is void (as all's).
  using Output = std::conditional_t<(std::is_void_v<typename Ops::Output> && ...), void,
                                    std::tuple<detail::output_or_unit<Ops>...>>;

  /// Made by `dataflow(ops...)`: works out the order from the ops' access sets.
  explicit DataflowOp(Ops... ops) : ops_(std::move(ops)...) {
    std::apply(
        [&](const auto&... op) {
          const std::array<AccessSet, sizeof...(Ops)> sets{accesses_of(op)...};
          after_ = detail::infer_dependencies(sets);
        },
        ops_);
  }

  /// Executes the ops; recorded, op i's nodes depend only on the last nodes of the ops it follows
  /// (ExecContext::run_dataflow). When one throws, the ones after it are skipped and the exception is rethrown.
  Output execute(ExecContext& ctx) const { return execute_all(ctx, std::index_sequence_for<Ops...>{}); }
  /// What the ops read and write.
  void accesses(AccessSet& out) const {
    std::apply([&](const auto&... op) { (collect_accesses(op, out), ...); }, ops_);
  }
  /// For each op, the earlier ops it follows directly (indices ascending): the inferred DAG.
  [[nodiscard]] const std::vector<std::vector<std::uint32_t>>& dependencies() const noexcept { return after_; }

 private:
  template <std::size_t... I>
  Output execute_all(ExecContext& ctx, std::index_sequence<I...> /*unused*/) const {
    std::tuple<std::optional<detail::output_or_unit<Ops>>...> results;
    ctx.run_dataflow(after_, [&](std::size_t index) {
      (void)((index == I ? (detail::execute_into<I>(ops_, results, ctx), true) : false) || ...);
    });
    if constexpr (!std::is_void_v<Output>) return Output{std::move(*std::get<I>(results))...};
  }

  std::tuple<Ops...> ops_;
  std::vector<std::vector<std::uint32_t>> after_;
};

/// A run-time number of ops of one type, in program order, ordered by what they read and write (as DataflowOp):
/// `dataflow(std::vector<Op>)`, for a list built in a loop. A GraphNode when Op is. Output void.
template <DeviceOp Op>
class [[nodiscard]] DataflowListOp : public OpBase<DataflowListOp<Op>>, public detail::CompositeTraits<Op> {
 public:
  /// The ops' outputs are dropped.
  using Output = void;

  /// Made by `dataflow(ops)`: works out the order from the ops' access sets.
  explicit DataflowListOp(std::vector<Op> ops) : ops_(std::move(ops)) {
    std::vector<AccessSet> sets;
    sets.reserve(ops_.size());
    for (const Op& op : ops_) sets.push_back(accesses_of(op));
    after_ = detail::infer_dependencies(sets);
  }
  /// Executes the ops (ExecContext::run_dataflow); stops at the first that throws.
  void execute(ExecContext& ctx) const {
    ctx.run_dataflow(after_, [&](std::size_t i) { ops_[i].execute(ctx); });
  }
  /// What the ops read and write.
  void accesses(AccessSet& out) const {
    for (const Op& op : ops_) collect_accesses(op, out);
  }
  /// For each op, the earlier ops it follows directly (indices ascending).
  [[nodiscard]] const std::vector<std::vector<std::uint32_t>>& dependencies() const noexcept { return after_; }
  /// The number of ops.
  [[nodiscard]] std::size_t size() const noexcept { return ops_.size(); }

 private:
  std::vector<Op> ops_;
  std::vector<std::vector<std::uint32_t>> after_;
};

/// Ops of one type in program order, run in parallel where what they read and write allows (DataflowListOp).
template <DeviceOp Op>
[[nodiscard]] DataflowListOp<Op> dataflow(std::vector<Op> ops) {
  return DataflowListOp<Op>(std::move(ops));
}

/// Ops in program order, run in parallel where what they read and write allows (see DataflowOp).
template <class... Ops>
requires(DeviceOp<std::remove_cvref_t<Ops>>&&...) DataflowOp<std::remove_cvref_t<Ops>...> dataflow(Ops&&... ops) {
  return DataflowOp<std::remove_cvref_t<Ops>...>(std::forward<Ops>(ops)...);
}

}  // namespace lazygraph
