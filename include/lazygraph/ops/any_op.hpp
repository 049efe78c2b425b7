#pragma once
/// \file
/// AnyOp: a GraphNode of any type behind one type, for code that picks among ops of different types at run time and
/// hands the choice on (the nn decoder's step backends: a graph of kernels, one persistent kernel, a tensor-parallel
/// rank's step with its collectives). It records or runs the op it holds through one virtual call, when it is
/// recorded or executed, never when a graph that recorded it replays. It is captured only (not
/// builds_without_capture): what it holds cannot say so in its type.

#include <memory>
#include <type_traits>
#include <utility>

#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/concepts.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {

/// A GraphNode with no output, of any type (see the file comment). Copies share the op they hold.
class [[nodiscard]] AnyOp : public OpBase<AnyOp> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode, as the op it holds.
  static constexpr bool is_graph_node = true;

  /// Holds `op`.
  template <GraphNode Op>
  requires(std::is_void_v<typename Op::Output> && !std::is_same_v<std::remove_cvref_t<Op>, AnyOp>) explicit AnyOp(Op op)
      : op_(std::make_shared<const Held<Op>>(std::move(op))) {}

  /// Records (or runs) the op it holds.
  void execute(ExecContext& ctx) const { op_->execute(ctx); }
  /// What the op it holds reads and writes.
  void accesses(AccessSet& out) const { op_->accesses(out); }

 private:
  struct Erased {
    Erased() = default;
    Erased(const Erased&) = delete;
    Erased& operator=(const Erased&) = delete;
    virtual ~Erased() = default;
    virtual void execute(ExecContext& ctx) const = 0;
    virtual void accesses(AccessSet& out) const = 0;
  };
  template <class Op>
  struct Held final : Erased {
    explicit Held(Op held) : op(std::move(held)) {}
    void execute(ExecContext& ctx) const override { op.execute(ctx); }
    void accesses(AccessSet& out) const override { collect_accesses(op, out); }
    Op op;
  };

  std::shared_ptr<const Erased> op_;
};

}  // namespace lazygraph
