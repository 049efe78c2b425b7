#pragma once
/// \file
/// nn's private part: an op that is one of several forms, chosen when it is made. Unlike choose(), which holds every
/// branch, a form here may not be constructible for the weights or sizes at hand (a quantized launch for a dense
/// weight, a fused all-reduce where the shape does not fit): only the chosen one is built.

#include <type_traits>
#include <utility>
#include <variant>

#include <lazygraph/lazygraph.hpp>

namespace lazygraph::nn::detail {

/// One of `Forms`, chosen when made: it records, runs and declares the accesses of the chosen one. A GraphNode (every
/// form is one); built without capture when every form is.
template <class Derived, class... Forms>
class OneOfOp : public OpBase<Derived> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode, as every form.
  static constexpr bool is_graph_node = true;

  /// Records (or runs) the chosen form.
  void execute(ExecContext& ctx) const {
    std::visit([&](const auto& op) { op.execute(ctx); }, op_);
  }
  /// The chosen form's accesses.
  void accesses(AccessSet& out) const {
    std::visit([&](const auto& op) { op.accesses(out); }, op_);
  }

 protected:
  /// Holds `op`, one of the forms.
  explicit OneOfOp(std::variant<Forms...> op) : op_(std::move(op)) {}

 private:
  std::variant<Forms...> op_;
};

/// One of two ops, chosen when made (either()).
template <class A, class B>
class EitherOp : public OneOfOp<EitherOp<A, B>, A, B> {
 public:
  /// Holds the chosen op.
  explicit EitherOp(std::variant<A, B> op) : EitherOp::OneOfOp(std::move(op)) {}
};

/// `make_first()` when `first`, else `make_second()`, as one op type; only the chosen one is called (choose() builds
/// both, which a branch that cannot be built for the case at hand rules out).
template <class MakeFirst, class MakeSecond>
[[nodiscard]] auto either(bool first, MakeFirst&& make_first, MakeSecond&& make_second) {
  using A = std::invoke_result_t<MakeFirst&>;
  using B = std::invoke_result_t<MakeSecond&>;
  using Op = EitherOp<A, B>;
  return first ? Op(std::variant<A, B>(std::in_place_index<0>, make_first()))
               : Op(std::variant<A, B>(std::in_place_index<1>, make_second()));
}

}  // namespace lazygraph::nn::detail
