#pragma once
/// \file
/// The allocating ops: zeros, ones, empty, dup, from_host. Their output is a new DeviceBuffer. They are
/// DeviceOps, never GraphNodes: recording one would free or reuse memory behind a replayed graph's back.
/// Run them with `sync_on` (or compose them into an op you run with `sync_on`) before capturing.

#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazygraph/driver/device_buffer.hpp"
#include "lazygraph/driver/half.hpp"
#include "lazygraph/driver/memcpy.hpp"
#include "lazygraph/ops/concepts.hpp"
#include "lazygraph/ops/fill.hpp"

namespace lazygraph {

/// `n` elements, each `init` applied to the buffer (nothing for `empty`).
template <class T, class Init>
class [[nodiscard]] AllocateOp : public OpBase<AllocateOp<T, Init>> {
 public:
  /// The new buffer.
  using Output = DeviceBuffer<T>;
  /// Marks an allocation: never a GraphNode, so Scope::record refuses it.
  static constexpr bool allocates_device_memory = true;

  /// Made by zeros, ones, empty, dup and from_host.
  AllocateOp(std::size_t n, Init init) : n_(n), init_(std::move(init)) {}

  // READ THIS IF YOUR COMPILE BREAKS HERE: an allocating op is a description; it is not a buffer yet.
  /// Never compiles: an op is not a buffer; the static_assert says to run it with `.sync_on(stream)` first.
  template <class U>
  requires std::is_same_v<U, T>
  operator DeviceBuffer<U>() const {  // NOLINT(google-explicit-constructor): exists only to explain
    static_assert(!std::is_same_v<U, T>,
                  "an allocating op (zeros, ones, empty, dup, from_host) describes an allocation and runs nothing: "
                  "run it with .sync_on(stream) to get its DeviceBuffer, e.g. `auto b = zeros<float>(n).sync_on(s);`");
    return DeviceBuffer<U>(Device::first(), 0);
  }
  /// Allocates on the device of `ctx.stream()` (synchronously) and submits the initialisation to that stream.
  /// \throws UsageError or CudaError as DeviceBuffer's constructor does.
  DeviceBuffer<T> execute(ExecContext& ctx) const {
    DeviceBuffer<T> buffer(ctx.stream().device(), n_);
    init_(ctx, buffer);
    return buffer;
  }

 private:
  std::size_t n_;
  Init init_;
};

namespace detail {

/// Fills with one value: a memset for 1, 2 and 4-byte types, a staged host copy otherwise.
template <class T>
struct FillWith {
  T value;
  void operator()(ExecContext& ctx, DeviceBuffer<T>& b) const {
    if (b.empty()) return;
    if constexpr (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4) {
      ctx.fill(b.view().address(), bit_pattern(value), sizeof(T), b.size());
    } else {
      const std::vector<T> host(b.size(), value);
      copy_async(ctx.stream(), b.view(), std::span<const T>(host));  // pageable: staged before the call returns
    }
  }
};

struct LeaveUninitialised {
  template <class T>
  void operator()(ExecContext& /*ctx*/, DeviceBuffer<T>& /*b*/) const {}
};

template <class T>
struct CopyFromDevice {
  DeviceSpan<const T> src;
  void operator()(ExecContext& ctx, DeviceBuffer<T>& b) const { copy_async(ctx.stream(), b.view(), src); }
};

template <class T>
struct CopyFromHost {
  std::vector<T> host;  // owned: the op can be built from a temporary and executed later
  void operator()(ExecContext& ctx, DeviceBuffer<T>& b) const {
    copy_async(ctx.stream(), b.view(), std::span<const T>(host));
  }
};

}  // namespace detail

/// `n` elements set to zero (all bits zero).
template <class T>
[[nodiscard]] AllocateOp<T, detail::FillWith<T>> zeros(std::size_t n) {
  static_assert(std::is_trivially_copyable_v<T>);
  T zero;
  std::memset(&zero, 0, sizeof zero);
  return {n, detail::FillWith<T>{zero}};
}

namespace detail {
/// The value 1 of T. Not `T(1)` for half: half is an aggregate of its bits, and C++20 would read that as bits 1.
template <class T>
constexpr T one() {
  if constexpr (std::is_same_v<T, half>) {
    return half::from_float(1.0F);
  } else {
    return T(1);
  }
}
}  // namespace detail

/// `n` elements set to 1.
template <class T>
[[nodiscard]] AllocateOp<T, detail::FillWith<T>> ones(std::size_t n) {
  return {n, detail::FillWith<T>{detail::one<T>()}};
}

/// `n` uninitialised elements.
template <class T>
[[nodiscard]] AllocateOp<T, detail::LeaveUninitialised> empty(std::size_t n) {
  return {n, detail::LeaveUninitialised{}};
}

/// A new buffer holding a copy of `src`.
template <class T>
[[nodiscard]] AllocateOp<std::remove_const_t<T>, detail::CopyFromDevice<std::remove_const_t<T>>> dup(
    DeviceSpan<T> src) {
  const std::size_t n = src.size();
  return {n, detail::CopyFromDevice<std::remove_const_t<T>>{DeviceSpan<const std::remove_const_t<T>>(std::move(src))}};
}

/// A new buffer holding a copy of host data (copied into the op when it is built).
template <class T>
[[nodiscard]] AllocateOp<T, detail::CopyFromHost<T>> from_host(std::span<const T> host) {
  return {host.size(), detail::CopyFromHost<T>{std::vector<T>(host.begin(), host.end())}};
}
/// A new buffer holding a copy of a vector (copied into the op when it is built).
template <class T>
[[nodiscard]] AllocateOp<T, detail::CopyFromHost<T>> from_host(const std::vector<T>& host) {
  return from_host(std::span<const T>(host));
}

}  // namespace lazygraph
