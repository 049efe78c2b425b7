#pragma once
/// \file
/// with_accesses(op, reads(...), writes(...)): an op with the memory it touches declared by hand, for an op that
/// cannot say (one of your own, a host call that reads device memory) or that says too much (a kernel given a whole
/// buffer that it writes only a row of). What is declared replaces what the op would report: dataflow(...) orders
/// it by the declaration and all(...) checks it by the declaration. Declaring less than the op touches makes both
/// wrong; nothing can check it.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "lazygraph/driver/device_span.hpp"
#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/combinators.hpp"
#include "lazygraph/ops/concepts.hpp"

namespace lazygraph {

/// A list of byte ranges, made by reads(...) or writes(...) from device spans of any element types.
struct AccessList {
  /// One range.
  struct Range {
    CUdeviceptr begin = 0;  ///< the first byte
    std::size_t bytes = 0;  ///< how many
  };
  /// The ranges.
  std::vector<Range> ranges;
  /// True for writes(...).
  bool writes = false;
};

/// The spans an op reads (any element types, read-only or writable).
template <class... T>
[[nodiscard]] AccessList reads(const DeviceSpan<T>&... spans) {
  return {{AccessList::Range{spans.address(), spans.size_bytes()}...}, false};
}

/// The spans an op writes (and may read). Read-only spans are a compile error: they cannot be written.
template <class... T>
[[nodiscard]] AccessList writes(const DeviceSpan<T>&... spans) {
  static_assert((!std::is_const_v<T> && ...), "writes(...): a read-only DeviceSpan<const T> is never written");
  return {{AccessList::Range{spans.address(), spans.size_bytes()}...}, true};
}

/// `op` touching exactly what its lists say (see the file comment). A GraphNode, buildable and so on exactly when
/// `op` is.
template <DeviceOp Op>
class [[nodiscard]] DeclaredOp : public OpBase<DeclaredOp<Op>>, public detail::CompositeTraits<Op> {
 public:
  /// Op's output.
  using Output = typename Op::Output;

  /// Made by with_accesses(). `name` names the op in conflict messages.
  DeclaredOp(std::string name, Op op, std::vector<AccessList> lists)
      : name_(std::move(name)), op_(std::move(op)), lists_(std::move(lists)) {}
  /// Executes `op`.
  Output execute(ExecContext& ctx) const { return op_.execute(ctx); }
  /// What the lists declare (not what `op` would report).
  void accesses(AccessSet& out) const {
    for (const AccessList& list : lists_) {
      for (const AccessList::Range& r : list.ranges) {
        if (list.writes) {
          out.write(r.begin, r.bytes, name_);
        } else {
          out.read(r.begin, r.bytes, name_);
        }
      }
    }
  }

 private:
  std::string name_;
  Op op_;
  std::vector<AccessList> lists_;
};

/// `op` declared to touch what `lists` (reads(...), writes(...)) say, named `name` in conflict messages.
template <class Op, class... Lists>
requires DeviceOp<std::remove_cvref_t<Op>> &&(std::is_same_v<std::remove_cvref_t<Lists>, AccessList>&&...)
    [[nodiscard]] DeclaredOp<std::remove_cvref_t<Op>> with_accesses(std::string name, Op&& op, Lists&&... lists) {
  return {std::move(name), std::forward<Op>(op), std::vector<AccessList>{std::forward<Lists>(lists)...}};
}

}  // namespace lazygraph
