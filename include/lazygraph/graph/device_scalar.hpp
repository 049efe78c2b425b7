#pragma once
/// \file
/// DeviceScalar<T>: one value in device memory that recorded kernels read through a pointer, so that a graph
/// replays with a new value without being re-recorded or updated: `graph.set(scalar, v)` before a replay, or
/// record `scalar.assign(v)` as a node.
///
/// The value is written with memset nodes or calls (one for a 1, 2 or 4-byte T, one per 4 bytes otherwise), so
/// setting it needs no host staging buffer and never makes the host wait.

#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "lazygraph/driver/device_buffer.hpp"
#include "lazygraph/driver/memcpy.hpp"
#include "lazygraph/kernels/expression.hpp"
#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/concepts.hpp"

namespace lazygraph {

/// Writes one value into a DeviceScalar when executed: a GraphNode (memset nodes when recorded). Made by
/// DeviceScalar::assign.
template <class T>
class [[nodiscard]] ScalarAssignOp : public OpBase<ScalarAssignOp<T>> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: memsets allocate nothing and touch no host memory.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext.
  static constexpr bool builds_without_capture = true;

  /// Made by DeviceScalar::assign.
  ScalarAssignOp(DeviceSpan<T> dst, const T& value) : dst_(std::move(dst)) {
    std::memcpy(bytes_.data(), &value, sizeof(T));
  }

  /// Submits the memset(s).
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(dst_.owner());
    if constexpr (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4) {
      unsigned pattern = 0;
      std::memcpy(&pattern, bytes_.data(), sizeof(T));
      ctx.fill(dst_.address(), pattern, sizeof(T), 1);
    } else {
      for (std::size_t at = 0; at < sizeof(T); at += 4) {
        unsigned word = 0;
        std::memcpy(&word, bytes_.data() + at, 4);
        ctx.fill(dst_.address() + at, word, 4, 1);
      }
    }
  }

  /// Writes the scalar.
  void accesses(AccessSet& out) const { out.write(dst_, "DeviceScalar::assign"); }

 private:
  DeviceSpan<T> dst_;
  std::array<unsigned char, sizeof(T)> bytes_{};
};

/// One `T` in device memory, for kernels to read (`cview()` for a `const T*` parameter) and the host to change
/// between replays without touching the graph. Move-only, like the DeviceBuffer it holds; a graph that records
/// a kernel reading it keeps the memory alive.
///
/// T must be trivially copyable and 1, 2 or a multiple of 4 bytes wide (at most 64): a memset writes it.
template <class T>
class DeviceScalar {
  static_assert(std::is_trivially_copyable_v<T>, "DeviceScalar<T>: T must be trivially copyable");
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || (sizeof(T) % 4 == 0 && sizeof(T) <= 64),
                "DeviceScalar<T>: T must be 1, 2 or a multiple of 4 bytes wide (at most 64), the widths memsets "
                "write");

 public:
  /// Allocates the value on `stream`'s device and sets it to `initial` (waits for that).
  DeviceScalar(const Stream& stream, const T& initial) : buffer_(stream.device(), 1) {
    assign(initial).sync_on(stream);
  }

  /// The value as a read-only kernel argument (a `const T*` parameter).
  [[nodiscard]] DeviceSpan<const T> cview() const { return buffer_.cview(); }
  /// The value as a writable kernel argument (a `T*` parameter: a kernel that updates it).
  [[nodiscard]] DeviceSpan<T> view() { return buffer_.view(); }

  /// An op that sets the value to `value` when it executes: run it (`sync_on`), queue it before a replay
  /// (`CudaGraph::set` does), or record it as a node.
  [[nodiscard]] ScalarAssignOp<T> assign(const T& value) const {
    // The op writes through a span of the buffer this scalar owns; the const is the handle's, not the value's.
    return {const_cast<DeviceBuffer<T>&>(buffer_).view(), value};
  }

  /// Copies the value back and waits for it (after the work already queued on `stream`).
  [[nodiscard]] T read(const Stream& stream) const {
    T out{};
    copy_async(stream, std::span<T>(&out, 1), buffer_.cview());
    stream.synchronize();
    return out;
  }

 private:
  DeviceBuffer<T> buffer_;
};

/// A DeviceScalar as an operand of a fused expression (kernels/expression.hpp): its one value for every element, read
/// from device memory each time the kernel runs, so `graph.set(scalar, v)` changes what a recorded `assign` computes
/// without re-recording. Float, half and bfloat16 only.
template <class T>
requires ExpressionElement<T>
[[nodiscard]] detail::BroadcastLeaf<T> to_expression(const DeviceScalar<T>& scalar) {
  return broadcast(scalar.cview());
}

}  // namespace lazygraph
