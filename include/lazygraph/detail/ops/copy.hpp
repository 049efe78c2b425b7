#pragma once
/// \file
/// copy(dst, src) as an op, in three directions. The sizes are checked when the op is built.
///
/// Device-to-device copies are graph nodes. Copies from or to host memory are not: a graph would replay
/// whatever the host memory holds at that time, long after the op was built. Stage host data into a graph's
/// input buffer with `CudaGraph::update(copy(...))`, and read results after `launch()`.
/// Host memory that is not pinned is staged by the driver (the call returns once it has been read); see
/// memcpy.hpp.

#include <span>
#include <type_traits>

#include "lazygraph/detail/driver/memcpy.hpp"
#include "lazygraph/detail/ops/concepts.hpp"

namespace lazygraph {

/// Device to device, made by `copy(dst, src)`: a GraphNode (a memcpy node when recorded). Holds both spans, so
/// their buffers live as long as the op (and as a graph that recorded it).
template <class T>
class [[nodiscard]] DeviceCopyOp : public OpBase<DeviceCopyOp<T>> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: it neither allocates nor touches host memory.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext, so CudaGraph::build can add it as a node.
  static constexpr bool builds_without_capture = true;

  /// \throws UsageError when the sizes differ.
  DeviceCopyOp(DeviceSpan<T> dst, DeviceSpan<const T> src) : dst_(std::move(dst)), src_(std::move(src)) {
    if (dst_.size() != src_.size()) detail::throw_size_mismatch("copy (device to device)", dst_.size(), src_.size());
  }
  /// Submits the copy (asynchronous; nothing for empty spans).
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(dst_.owner());
    ctx.keep_alive(src_.owner());
    ctx.copy(dst_.address(), src_.address(), dst_.size_bytes());
  }

 private:
  DeviceSpan<T> dst_;
  DeviceSpan<const T> src_;
};

/// Host to device. The host memory is read when the op executes, not when it is built: keep it valid.
template <class T>
class [[nodiscard]] UploadOp : public OpBase<UploadOp<T>> {
 public:
  /// No output.
  using Output = void;
  /// Marks a host copy: never a GraphNode.
  static constexpr bool transfers_host_memory = true;

  /// \throws UsageError when the sizes differ.
  UploadOp(DeviceSpan<T> dst, std::span<const T> src) : dst_(std::move(dst)), src_(src) {
    if (dst_.size() != src_.size()) detail::throw_size_mismatch("copy (host to device)", dst_.size(), src_.size());
  }
  /// Submits the copy to `ctx.stream()`. Pageable `src` memory has been read when this returns; pinned memory is
  /// read when the stream gets there (memcpy.hpp).
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(dst_.owner());
    copy_async(ctx.stream(), dst_, src_);
  }

 private:
  DeviceSpan<T> dst_;
  std::span<const T> src_;
};

/// Device to host. The host memory is written when the stream reaches the op.
template <class T>
class [[nodiscard]] DownloadOp : public OpBase<DownloadOp<T>> {
 public:
  /// No output.
  using Output = void;
  /// Marks a host copy: never a GraphNode.
  static constexpr bool transfers_host_memory = true;

  /// \throws UsageError when the sizes differ.
  DownloadOp(std::span<T> dst, DeviceSpan<const T> src) : dst_(dst), src_(std::move(src)) {
    if (dst_.size() != src_.size()) detail::throw_size_mismatch("copy (device to host)", dst_.size(), src_.size());
  }
  /// Submits the copy to `ctx.stream()`: `dst` holds the data once the stream has passed it (sync_on waits).
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(src_.owner());
    copy_async(ctx.stream(), dst_, src_);
  }

 private:
  std::span<T> dst_;
  DeviceSpan<const T> src_;
};

/// Device to device; `src` may be a writable or read-only span. \throws UsageError when the sizes differ.
template <class T>
[[nodiscard]] DeviceCopyOp<T> copy(DeviceSpan<T> dst, std::type_identity_t<DeviceSpan<const T>> src) {
  static_assert(!std::is_const_v<T>,
                "copy: the destination is a read-only DeviceSpan<const T>; pass a writable view (buffer.view())");
  return {std::move(dst), std::move(src)};
}

/// Host to device (`src`: a std::vector, array or std::span). \throws UsageError when the sizes differ.
template <class T>
[[nodiscard]] UploadOp<T> copy(DeviceSpan<T> dst, std::type_identity_t<std::span<const T>> src) {
  static_assert(!std::is_const_v<T>,
                "copy: the destination is a read-only DeviceSpan<const T>; pass a writable view (buffer.view())");
  return {std::move(dst), src};
}

/// Device to host. \throws UsageError when the sizes differ.
template <class T>
[[nodiscard]] DownloadOp<T> copy(std::span<T> dst, std::type_identity_t<DeviceSpan<const T>> src) {
  return {dst, std::move(src)};
}

}  // namespace lazygraph
