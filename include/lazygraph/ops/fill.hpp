#pragma once
/// \file
/// fill(span, value), join() and value(x): graph nodes that need no kernel.

#include <cstring>
#include <type_traits>
#include <utility>

#include "lazygraph/driver/device_span.hpp"
#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/concepts.hpp"

namespace lazygraph {

namespace detail {
template <class T>
unsigned bit_pattern(const T& value) {
  unsigned pattern = 0;
  std::memcpy(&pattern, &value, sizeof(T));
  return pattern;
}
}  // namespace detail

/// Sets every element of a span to one value (a memset node when recorded).
template <class T>
class [[nodiscard]] FillOp : public OpBase<FillOp<T>> {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4,
                "fill: the element type must be 1, 2 or 4 bytes (the driver's memset widths); use a kernel otherwise");

 public:
  /// No output.
  using Output = void;
  /// A GraphNode: a memset allocates nothing and touches no host memory.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext, so CudaGraph::build can add it as a node.
  static constexpr bool builds_without_capture = true;

  /// Made by `fill(dst, value)`.
  FillOp(DeviceSpan<T> dst, T value) : dst_(std::move(dst)), pattern_(detail::bit_pattern(value)) {}
  /// Submits the memset (nothing for an empty span).
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(dst_.owner());
    ctx.fill(dst_.address(), pattern_, sizeof(T), dst_.size());
  }
  /// Writes `dst`.
  void accesses(AccessSet& out) const { out.write(dst_, "fill"); }

 private:
  DeviceSpan<T> dst_;
  unsigned pattern_;
};

/// Sets every element of `dst` to `value` when executed. T must be 1, 2 or 4 bytes wide, and `dst` writable
/// (both are compile errors otherwise).
template <class T>
[[nodiscard]] FillOp<T> fill(DeviceSpan<T> dst, std::type_identity_t<T> value) {
  static_assert(!std::is_const_v<T>,
                "fill: the destination is a read-only DeviceSpan<const T>; pass a writable view (buffer.view())");
  return {std::move(dst), value};
}

/// `join()`: a point everything before it completes before anything after it starts — an empty node in a
/// graph. After `all(a, b, c)` followed by `all(d, e, f)`, it turns nine dependencies into six.
class [[nodiscard]] JoinOp : public OpBase<JoinOp> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: an empty node does nothing.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext.
  static constexpr bool builds_without_capture = true;
  /// Adds the empty node (nothing when run eagerly: a stream is ordered already).
  void execute(ExecContext& ctx) const { ctx.join(); }
};

/// An empty node that joins everything before it (see JoinOp).
[[nodiscard]] inline JoinOp join() { return {}; }

/// A host value as an op: no GPU work, its output is the value.
template <class T>
class [[nodiscard]] ValueOp : public OpBase<ValueOp<T>> {
 public:
  /// A copy of the value.
  using Output = T;
  /// A GraphNode: it does no GPU work at all.
  static constexpr bool is_graph_node = true;
  /// Submits nothing, so CudaGraph::build takes it too.
  static constexpr bool builds_without_capture = true;

  /// Made by `value(v)`.
  explicit ValueOp(T v) : value_(std::move(v)) {}
  /// Returns a copy of the value; submits nothing.
  T execute(ExecContext& /*ctx*/) const { return value_; }
  /// Touches no device memory.
  void accesses(AccessSet& /*out*/) const {}

 private:
  T value_;
};

/// `v` as an op whose output is (a copy of) `v`: to give a host value to `>>`, `all` or `map`, or to return it
/// from a recorded expression.
template <class T>
[[nodiscard]] ValueOp<std::decay_t<T>> value(T&& v) {
  return ValueOp<std::decay_t<T>>(std::forward<T>(v));
}

}  // namespace lazygraph
