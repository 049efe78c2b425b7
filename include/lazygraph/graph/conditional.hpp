#pragma once
/// \file
/// Control flow on the device: `if_`, `if_else`, `while_` and `switch_` record CUDA conditional nodes whose bodies
/// are ops, steered by a Condition (condition.hpp) that kernels set with lg::set_condition. The graph decides on the
/// GPU, with no host round trip: a decoder can run many steps in one replay, stopping when a kernel says so.
///
/// They are GraphNodes exactly when their bodies are, compose with `>>` and `all`, nest (a body may hold another
/// conditional op), and are recorded by capture (CudaGraph::scope or capture) and by CudaGraph::build alike; run
/// eagerly they throw UsageError. Every condition belongs to the outermost graph (Scope::condition), nested nodes'
/// too. What a body cannot hold (CUDA's rule): host calls and event records or waits.
///
/// A body may hold collectives (ops/collective.hpp, captured only). NCCL adds event nodes to what it captures, to
/// order a graph's collectives against eager ones on the same communicator; in a body they become empty nodes, so
/// that ordering falls to the stream: launch the graph on the stream of the communicator's eager work, or
/// synchronize between them.
///
/// WHILE loops are bounded unless asked otherwise: `while_(c, body, bound)` counts iterations on the device and
/// stops the loop at `bound.max_iterations()`, reporting that it did (LoopBound::reached); `while_unbounded(c,
/// body)` is the explicit opt-in to a loop only its body ends — one that never clears its condition hangs the GPU.

#include <cuda.h>

#include <array>
#include <exception>
#include <functional>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>

#include "lazygraph/detail/graph/graph_recording.hpp"
#include "lazygraph/driver/device_buffer.hpp"
#include "lazygraph/driver/memcpy.hpp"
#include "lazygraph/graph/condition.hpp"
#include "lazygraph/kernels/kernel.hpp"
#include "lazygraph/kernels/kernel_library.hpp"
#include "lazygraph/ops/concepts.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {

/// The body type rule of every conditional op, one sentence like Scope::record's.
template <class Body>
constexpr void check_conditional_body() {
  static_assert(GraphNode<Body>,
                "if_, if_else, while_ and switch_ take only GraphNode bodies (what Scope::record accepts); this body "
                "allocates, copies host memory, runs host code or is not an op; build it from kernel launches, "
                "copies and fills on buffers allocated before the scope");
}

/// A conditional node of IF, WHILE or SWITCH type over `Bodies` (made by if_, if_else, while_, switch_): a GraphNode
/// when every body is one. Executed, it records the node and captures body i into the node's i-th body graph.
template <class... Bodies>
class [[nodiscard]] ConditionalOp : public OpBase<ConditionalOp<Bodies...>> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode exactly when its bodies are.
  static constexpr bool is_graph_node = (is_graph_node_v<Bodies> && ...);
  /// CudaGraph::build can add it exactly when it can add its bodies.
  static constexpr bool builds_without_capture = (is_buildable_v<Bodies> && ...);

  /// Made by if_, if_else, while_ and switch_. `before` runs in the enclosing graph first (while_ zeroes its
  /// counter there); `after_body` runs at the end of body 0 (while_'s guard).
  ConditionalOp(Condition condition, CUgraphConditionalNodeType type, std::function<void(ExecContext&)> before,
                std::function<void(ExecContext&)> after_body, Bodies... bodies)
      : condition_(condition),
        type_(type),
        before_(std::move(before)),
        after_body_(std::move(after_body)),
        bodies_(std::move(bodies)...) {}

  /// Records the node and its bodies. \throws UsageError eagerly.
  void execute(ExecContext& ctx) const {
    detail::GraphRecording& recording =
        detail::GraphRecording::of(ctx, "if_, if_else, while_ and switch_ are nodes of a graph");
    if (before_) before_(ctx);
    recording.conditional(condition_.handle, type_, sizeof...(Bodies), [this](unsigned index, ExecContext& body) {
      execute_body(index, body, std::index_sequence_for<Bodies...>{});
      if (index == 0 && after_body_) after_body_(body);
    });
  }

 private:
  template <std::size_t... I>
  void execute_body(unsigned index, ExecContext& ctx, std::index_sequence<I...> /*indices*/) const {
    ((index == I ? static_cast<void>(std::get<I>(bodies_).execute(ctx)) : static_cast<void>(0)), ...);
  }

  Condition condition_;
  CUgraphConditionalNodeType type_;
  std::function<void(ExecContext&)> before_;
  std::function<void(ExecContext&)> after_body_;
  std::tuple<Bodies...> bodies_;
};

/// Runs `body` when `condition` is nonzero at this point of the graph (an IF node).
template <class Body>
// NOLINTNEXTLINE(readability-identifier-naming): a keyword and an underscore
[[nodiscard]] ConditionalOp<Body> if_(Condition condition, Body body) {
  check_conditional_body<Body>();
  return ConditionalOp<Body>(condition, CU_GRAPH_COND_TYPE_IF, {}, {}, std::move(body));
}

/// Runs `then` when `condition` is nonzero, `otherwise` when it is zero (an IF node with two bodies; needs a
/// driver for CUDA 12.8 or newer, else UsageError when recorded).
template <class Then, class Otherwise>
[[nodiscard]] ConditionalOp<Then, Otherwise> if_else(Condition condition, Then then, Otherwise otherwise) {
  check_conditional_body<Then>();
  check_conditional_body<Otherwise>();
  return ConditionalOp<Then, Otherwise>(condition, CU_GRAPH_COND_TYPE_IF, {}, {}, std::move(then),
                                        std::move(otherwise));
}

/// Runs body i where `condition` is i, none when it is past the last (a SWITCH node; needs a driver for CUDA 12.8
/// or newer, else UsageError when recorded).
template <class... Bodies>
// NOLINTNEXTLINE(readability-identifier-naming): a keyword and an underscore
[[nodiscard]] ConditionalOp<Bodies...> switch_(Condition condition, Bodies... bodies) {
  static_assert(sizeof...(Bodies) >= 1, "switch_ needs at least one body");
  (check_conditional_body<Bodies>(), ...);
  return ConditionalOp<Bodies...>(condition, CU_GRAPH_COND_TYPE_SWITCH, {}, {}, std::move(bodies)...);
}

/// The bound of while_ loops: at most `max_iterations` iterations per replay, counted on the device by a guard
/// kernel (kernels/control.cu) after each iteration of the body. Allocates its counters and looks the guard up
/// when made (outside any capture); one LoopBound serves one while_ node at a time.
class LoopBound {
 public:
  /// \throws UsageError for max_iterations 0 (every library has the core set, so while_guard is found).
  LoopBound(const KernelLibrary& library, unsigned max_iterations)
      : LoopBound(library.get<void(Condition, unsigned*, unsigned)>("while_guard"), library.device(), max_iterations) {}
  /// With the guard kernel already looked up (core kernels/control.cu's while_guard). \throws UsageError for
  /// max_iterations 0.
  LoopBound(const Kernel<void(Condition, unsigned*, unsigned)>& guard, const Device& device, unsigned max_iterations)
      : guard_(guard), state_(device, 2), max_iterations_(max_iterations) {
    if (max_iterations == 0) throw UsageError("LoopBound: max_iterations must be at least 1");
  }

  /// The bound.
  [[nodiscard]] unsigned max_iterations() const noexcept { return max_iterations_; }
  /// The iterations of the last replay's loop, read after `stream`'s work so far (waits for it).
  [[nodiscard]] unsigned iterations(const Stream& stream) const { return read(stream)[0]; }
  /// Whether the last replay's loop ran max_iterations times, so that the bound stopped it (or the body stopped at
  /// exactly the bound: the two cannot be told apart). Waits for `stream`'s work so far.
  [[nodiscard]] bool reached(const Stream& stream) const { return read(stream)[1] != 0; }

 private:
  template <class Body>
  // NOLINTNEXTLINE(readability-identifier-naming): a keyword and an underscore
  friend ConditionalOp<Body> while_(Condition condition, Body body, const LoopBound& bound);

  [[nodiscard]] std::array<unsigned, 2> read(const Stream& stream) const {
    std::array<unsigned, 2> out{};
    copy_async(stream, std::span<unsigned>(out), state_.cview());
    stream.synchronize();
    return out;
  }

  Kernel<void(Condition, unsigned*, unsigned)> guard_;
  mutable DeviceBuffer<unsigned> state_;  ///< [iterations, reached]: the device writes it, a const bound included
  unsigned max_iterations_;
};

/// Runs `body` while `condition` is nonzero (a WHILE node: checked before the first iteration and after each), at
/// most bound.max_iterations() times per replay. The body clears the condition (lg::set_condition(c, 0)) to stop;
/// the bound stops a loop whose body never does and says so (LoopBound::reached). `bound` must outlive the op and the
/// graph (a temporary bound does not compile).
template <class Body>
// NOLINTNEXTLINE(readability-identifier-naming): a keyword and an underscore
[[nodiscard]] ConditionalOp<Body> while_(Condition condition, Body body, const LoopBound& bound) {
  check_conditional_body<Body>();
  const LoopBound* b = &bound;
  return ConditionalOp<Body>(
      condition, CU_GRAPH_COND_TYPE_WHILE,
      [b](ExecContext& ctx) {
        ctx.keep_alive(b->state_.cview().owner());
        ctx.fill(b->state_.cview().address(), 0, 4, 2);
      },
      [b, condition](ExecContext& ctx) {
        b->guard_({{1, 1, 1}, {1, 1, 1}, 0}, condition, b->state_.view(), b->max_iterations_).execute(ctx);
      },
      std::move(body));
}

namespace detail {
/// False for every Body: what while_ asserts when given a temporary LoopBound, so the diagnostic names the rule.
template <class Body>
inline constexpr bool loop_bound_outlives_the_graph = false;
}  // namespace detail

/// READ THIS IF YOUR COMPILE BREAKS HERE: a temporary LoopBound would be gone before the op is recorded, and its
/// counters with it, so make the bound a variable that outlives the graph. (Not `= delete`: a deleted function
/// cannot say why before C++26, and this overload's static_assert does.)
template <class Body>
// NOLINTNEXTLINE(readability-identifier-naming): a keyword and an underscore
ConditionalOp<Body> while_(Condition /*condition*/, Body /*body*/, const LoopBound&& /*bound*/) {
  static_assert(detail::loop_bound_outlives_the_graph<Body>,
                "while_ needs a LoopBound that outlives the graph: make the bound a variable, not a temporary");
  std::terminate();  // not reached: every instantiation fails the static_assert (this only spares a -Wreturn-type)
}

/// Runs `body` while `condition` is nonzero, with no bound: only the body ends the loop, and one that never clears
/// its condition hangs the GPU. Prefer while_ with a LoopBound.
template <class Body>
[[nodiscard]] ConditionalOp<Body> while_unbounded(Condition condition, Body body) {
  check_conditional_body<Body>();
  return ConditionalOp<Body>(condition, CU_GRAPH_COND_TYPE_WHILE, {}, {}, std::move(body));
}

}  // namespace lazygraph
