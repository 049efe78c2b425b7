#pragma once
/// \file
/// Composing ops as C++ expressions:
///   a >> b          runs b after a; its output is b's.
///   all(a, b, ...)  runs independent ops concurrently (parallel branches when recorded) and joins them; its
///                   output is a tuple of theirs (void outputs become `Unit`), or void when all are void.
///                   Branches that touch the same bytes, one of them writing, are refused when it is built
///                   (access.hpp); all_unchecked(...) skips that check, dataflow(...) orders such ops instead.
///   chain(ops)      runs a run-time number of ops of one type in order (a std::vector<Op>); output void.
///   choose(c, a, b) a when c, else b (c fixed when the op is built).
///   map(a, f)       applies a host function to a's output when a executes (when recorded: once, at record
///                   time, not on every replay); its output is f's result.
/// A composite is a GraphNode exactly when all its parts are. Every op type is [[nodiscard]]: an op built and
/// dropped does nothing, which is always a mistake (run it with `.sync_on(stream)` or record it).

#include <array>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/concepts.hpp"

namespace lazygraph {

/// The output of a void op inside `all`'s tuple.
struct Unit {
  /// Every Unit equals every other.
  friend constexpr bool operator==(Unit, Unit) = default;
};

namespace detail {
template <class Op>
using output_or_unit = std::conditional_t<std::is_void_v<typename Op::Output>, Unit, typename Op::Output>;

/// Executes the I-th of `ops` and keeps its output (Unit for void) in the I-th of `results`: how all() and dataflow()
/// collect their parts' outputs.
template <std::size_t I, class Ops, class Results>
void execute_into(const Ops& ops, Results& results, ExecContext& ctx) {
  if constexpr (std::is_void_v<decltype(std::get<I>(ops).execute(ctx))>) {
    std::get<I>(ops).execute(ctx);
    std::get<I>(results).emplace();
  } else {
    std::get<I>(results).emplace(std::get<I>(ops).execute(ctx));
  }
}

/// Selects AllOp's constructor without the race check.
struct UncheckedTag {};

/// Properties a composite forwards from its parts.
template <class... Ops>
struct CompositeTraits {
  static constexpr bool is_graph_node = all_graph_nodes<Ops...>;
  static constexpr bool contains_allocation = any_allocation<Ops...>;
  static constexpr bool contains_host_transfer = any_host_transfer<Ops...>;
  static constexpr bool builds_without_capture = all_buildable<Ops...>;
  static constexpr bool runs_host_code = any_host_code<Ops...>;
};

/// A host function (a lambda, function object, function or function pointer): what `>>` is given by mistake for a
/// DeviceOp, which host_call makes of it. Only the explanation below uses it.
template <class F>
concept HostFunction =
    std::is_function_v<std::remove_pointer_t<std::remove_cvref_t<F>>> || std::is_invocable_v<F&> || requires {
  &std::remove_cvref_t<F>::operator();
};
/// One side of `a >> b` a DeviceOp, the other a host function.
template <class A, class B>
concept OpAndHostFunction = (DeviceOp<std::remove_cvref_t<A>> && !DeviceOp<std::remove_cvref_t<B>> &&
                             HostFunction<B>) ||
                            (DeviceOp<std::remove_cvref_t<B>> && !DeviceOp<std::remove_cvref_t<A>> && HostFunction<A>);
}  // namespace detail

/// `a >> b`: b runs after a on the same stream (in a graph, b's nodes depend on a's). A GraphNode when both are.
template <DeviceOp A, DeviceOp B>
class [[nodiscard]] SequenceOp : public OpBase<SequenceOp<A, B>>, public detail::CompositeTraits<A, B> {
 public:
  /// The output of b; a's is dropped.
  using Output = typename B::Output;

  /// Made by `a >> b`.
  SequenceOp(A a, B b) : a_(std::move(a)), b_(std::move(b)) {}
  /// Executes a, then b, and returns b's output.
  Output execute(ExecContext& ctx) const {
    a_.execute(ctx);
    return b_.execute(ctx);
  }
  /// What a and b read and write.
  void accesses(AccessSet& out) const {
    collect_accesses(a_, out);
    collect_accesses(b_, out);
  }

 private:
  A a_;
  B b_;
};

/// `a >> b`: b runs after a. Only for DeviceOps, so streams' `>>` is untouched.
template <class A, class B>
requires DeviceOp<std::remove_cvref_t<A>> && DeviceOp<std::remove_cvref_t<B>>
    SequenceOp<std::remove_cvref_t<A>, std::remove_cvref_t<B>>
operator>>(A&& a, B&& b) { return {std::forward<A>(a), std::forward<B>(b)}; }

// ---------------------------------------------------------------------------------------------------------
// READ THIS IF YOUR COMPILE BREAKS HERE: `>>` sequences DeviceOps; host code joins a sequence as an op,
// host_call("name", f). The static_assert below says so.
// ---------------------------------------------------------------------------------------------------------
/// `op >> f` or `f >> op` with a host function f (a lambda, function object or function): never compiles; the
/// static_assert says to wrap f in host_call.
template <class A, class B>
requires detail::OpAndHostFunction<A, B>
void operator>>(A&& /*a*/, B&& /*b*/) {
  constexpr bool both_sides_are_device_ops = DeviceOp<std::remove_cvref_t<A>> && DeviceOp<std::remove_cvref_t<B>>;
  static_assert(both_sides_are_device_ops,
                "`op >> f`: f is a host function, not a DeviceOp, and `>>` sequences DeviceOps; wrap it in "
                "host_call: op >> host_call(\"name\", f) runs f on a driver thread when the stream reaches it");
}

/// `all(ops...)`: independent ops that may run concurrently (the first on the current stream, the others on side
/// streams; parallel branches when recorded), joined before anything after them. They must not write memory
/// another of them reads or writes: nothing orders them. The constructor checks that from their access sets
/// (access.hpp) unless made by all_unchecked. A GraphNode when every op is.
template <DeviceOp... Ops>
class [[nodiscard]] AllOp : public OpBase<AllOp<Ops...>>, public detail::CompositeTraits<Ops...> {
  static_assert(sizeof...(Ops) >= 1, "all(): give it at least one op");

 public:
  /// A tuple of the ops' outputs in order (Unit for a void one), or void when every output is void.
  using Output = std::conditional_t<(std::is_void_v<typename Ops::Output> && ...), void,
                                    std::tuple<detail::output_or_unit<Ops>...>>;

  /// Made by `all(ops...)`. \throws UsageError when two branches conflict: one writes bytes another reads or
  ///         writes (naming both ops and the bytes). Opaque ops (access.hpp) are not looked into.
  explicit AllOp(Ops... ops) : ops_(std::move(ops)...) { check_independent(std::index_sequence_for<Ops...>{}); }
  /// Made by `all_unchecked(ops...)`: not checked.
  AllOp(detail::UncheckedTag /*unused*/, Ops... ops) : ops_(std::move(ops)...), checked_(false) {}

  /// Executes each op on its own branch (ExecContext::fork_join). When one throws, the branches after it are
  /// skipped, all are joined, and the exception is rethrown.
  Output execute(ExecContext& ctx) const { return execute_all(ctx, std::index_sequence_for<Ops...>{}); }
  /// What the branches read and write.
  void accesses(AccessSet& out) const {
    std::apply([&](const auto&... op) { (collect_accesses(op, out), ...); }, ops_);
  }
  /// False for all_unchecked.
  [[nodiscard]] bool checked() const noexcept { return checked_; }

 private:
  template <std::size_t... I>
  void check_independent(std::index_sequence<I...> /*unused*/) const {
    if constexpr (sizeof...(Ops) > 1) {
      const std::array<AccessSet, sizeof...(Ops)> sets{accesses_of(std::get<I>(ops_))...};
      detail::check_branches_independent(sets);
    }
  }

  template <std::size_t... I>
  Output execute_all(ExecContext& ctx, std::index_sequence<I...> /*unused*/) const {
    std::tuple<std::optional<detail::output_or_unit<Ops>>...> results;
    ctx.fork_join([&] { detail::execute_into<I>(ops_, results, ctx); }...);
    if constexpr (!std::is_void_v<Output>) return Output{std::move(*std::get<I>(results))...};
  }

  std::tuple<Ops...> ops_;
  bool checked_ = true;
};

/// Independent ops, run concurrently and joined. \throws UsageError for branches that race (see AllOp's constructor).
template <class... Ops>
requires(DeviceOp<std::remove_cvref_t<Ops>>&&...) AllOp<std::remove_cvref_t<Ops>...> all(Ops&&... ops) {
  return AllOp<std::remove_cvref_t<Ops>...>(std::forward<Ops>(ops)...);
}

/// `all(ops...)` without the race check, for branches that share a span but never the same bytes at the same
/// time (a kernel given a whole buffer that writes only its own part). Nothing orders the branches: a race
/// between them is yours to rule out.
template <class... Ops>
requires(DeviceOp<std::remove_cvref_t<Ops>>&&...) AllOp<std::remove_cvref_t<Ops>...> all_unchecked(Ops&&... ops) {
  return AllOp<std::remove_cvref_t<Ops>...>(detail::UncheckedTag{}, std::forward<Ops>(ops)...);
}

/// `chain(ops)`: a run-time number of ops of one type, in order on one stream. A GraphNode when Op is.
template <DeviceOp Op>
class [[nodiscard]] ChainOp : public OpBase<ChainOp<Op>>, public detail::CompositeTraits<Op> {
 public:
  /// The ops' outputs are dropped.
  using Output = void;

  /// Made by `chain(ops)`.
  explicit ChainOp(std::vector<Op> ops) : ops_(std::move(ops)) {}
  /// Executes the ops in order; stops at the first that throws.
  void execute(ExecContext& ctx) const {
    for (const Op& op : ops_) op.execute(ctx);
  }
  /// What the ops read and write.
  void accesses(AccessSet& out) const {
    for (const Op& op : ops_) collect_accesses(op, out);
  }
  /// The number of ops.
  [[nodiscard]] std::size_t size() const noexcept { return ops_.size(); }

 private:
  std::vector<Op> ops_;
};

/// Ops of one type, run in order: for sequences whose length is known only at run time (layers, steps).
template <DeviceOp Op>
[[nodiscard]] ChainOp<Op> chain(std::vector<Op> ops) {
  return ChainOp<Op>(std::move(ops));
}

/// `choose(first, a, b)`: a when `first`, else b, decided when the op is built (not on the device: see if_ for
/// that). For a forward pass with two variants of one part, e.g. a fused kernel and the kernels it replaces, in
/// one op type. Both outputs must be the same type. A GraphNode when both are.
template <DeviceOp A, DeviceOp B>
class [[nodiscard]] ChooseOp : public OpBase<ChooseOp<A, B>>, public detail::CompositeTraits<A, B> {
  static_assert(std::is_same_v<typename A::Output, typename B::Output>,
                "choose(first, a, b): a and b must have the same Output type");

 public:
  /// The chosen op's output.
  using Output = typename A::Output;

  /// Made by `choose(first, a, b)`.
  ChooseOp(bool first, A a, B b) : first_(first), a_(std::move(a)), b_(std::move(b)) {}
  /// Executes a or b.
  Output execute(ExecContext& ctx) const { return first_ ? a_.execute(ctx) : b_.execute(ctx); }
  /// What the chosen op reads and writes.
  void accesses(AccessSet& out) const {
    if (first_) {
      collect_accesses(a_, out);
    } else {
      collect_accesses(b_, out);
    }
  }
  /// Whether a is the one that runs.
  [[nodiscard]] bool first() const noexcept { return first_; }

 private:
  bool first_;
  A a_;
  B b_;
};

/// a when `first`, else b (see ChooseOp).
template <DeviceOp A, DeviceOp B>
[[nodiscard]] ChooseOp<A, B> choose(bool first, A a, B b) {
  return ChooseOp<A, B>(first, std::move(a), std::move(b));
}

/// `map(a, f)`: a, then `f` called on the host with a's output (or with nothing when a's is void). `f` runs when
/// the op executes: at record time for a graph, never on replay. A GraphNode when a is.
template <DeviceOp A, class F>
class [[nodiscard]] MapOp : public OpBase<MapOp<A, F>>, public detail::CompositeTraits<A> {
  template <class Op, class Fn>
  struct Result {
    using type = std::invoke_result_t<const Fn&, typename Op::Output>;
  };
  template <class Op, class Fn>
  requires std::is_void_v<typename Op::Output>
  struct Result<Op, Fn> {
    using type = std::invoke_result_t<const Fn&>;
  };

 public:
  /// What `f` returns.
  using Output = typename Result<A, F>::type;

  /// Made by `map(a, f)`.
  MapOp(A a, F f) : a_(std::move(a)), f_(std::move(f)) {}
  /// Executes a, then returns `f(output of a)`. `f` does not wait for the GPU: it sees a's output value (a
  /// buffer, a span), not the results of a's work.
  Output execute(ExecContext& ctx) const {
    if constexpr (std::is_void_v<typename A::Output>) {
      a_.execute(ctx);
      return std::invoke(f_);
    } else {
      return std::invoke(f_, a_.execute(ctx));
    }
  }
  /// What a reads and writes (f runs on the host).
  void accesses(AccessSet& out) const { collect_accesses(a_, out); }

 private:
  A a_;
  F f_;
};

/// Applies `f` on the host to `op`'s output.
template <class Op, class F>
requires DeviceOp<std::remove_cvref_t<Op>> MapOp<std::remove_cvref_t<Op>, std::decay_t<F>> map(Op&& op, F&& f) {
  return {std::forward<Op>(op), std::forward<F>(f)};
}

}  // namespace lazygraph
