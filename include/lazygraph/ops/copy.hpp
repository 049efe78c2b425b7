#pragma once
/// \file
/// copy(dst, src) as an op, in three directions, and copy_2d(...), rows of a matrix between two pitches on the
/// device. The sizes are checked when the op is built.
///
/// Device-to-device copies are graph nodes, and so are copies from or to a StagingBuffer's PinnedSpan: pinned
/// memory the graph keeps alive, at an address that stays put, which each replay reads or writes — write the input
/// there before the launch, read the output after the wait (staging_buffer.hpp). Copies from or to other host
/// memory (std::span, std::vector) are not graph nodes, and not accepted by Scope::record (a compile error): the
/// graph would replay from memory the caller may have freed or moved. Run them eagerly (sync_on,
/// CudaGraph::update). Host memory that is not pinned is staged by the driver (the call returns once it has been
/// read); see memcpy.hpp.
///
/// A staging copy is a memcpy node unless it is given a StagingCopier (HostIo gives one: a kernel that reads or
/// writes the pinned memory through unified addressing, cheaper per replay than a memcpy node for small copies).

#include <cuda.h>

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "lazygraph/driver/memcpy.hpp"
#include "lazygraph/driver/staging_buffer.hpp"
#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/concepts.hpp"

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
  /// Reads `src`, writes `dst`.
  void accesses(AccessSet& out) const {
    out.read(src_, "copy");
    out.write(dst_, "copy");
  }

 private:
  DeviceSpan<T> dst_;
  DeviceSpan<const T> src_;
};

/// Device to device in two dimensions, made by `copy_2d(dst, dst_pitch, src, src_pitch, width, height)`: `height`
/// rows of `width` elements, `src_pitch` elements apart in `src` and `dst_pitch` in `dst` (copy_2d_async, memcpy.hpp).
/// A GraphNode (one memcpy node in a graph, captured or built) that holds both spans, so their buffers live as long
/// as the op and a graph that recorded it.
template <class T>
class [[nodiscard]] DeviceCopy2dOp : public OpBase<DeviceCopy2dOp<T>> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: it neither allocates nor touches host memory.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext.
  static constexpr bool builds_without_capture = true;

  /// \throws UsageError when `width` is larger than a pitch (for more than one row), or when the last row ends past
  ///         the end of its span.
  DeviceCopy2dOp(DeviceSpan<T> dst, std::size_t dst_pitch, DeviceSpan<const T> src, std::size_t src_pitch,
                 std::size_t width, std::size_t height)
      : dst_(std::move(dst)),
        src_(std::move(src)),
        dst_pitch_(dst_pitch),
        src_pitch_(src_pitch),
        width_(width),
        height_(height) {
    detail::check_copy_2d("copy_2d", dst_.size(), dst_pitch_, src_.size(), src_pitch_, width_, height_);
  }
  /// Submits the copy (asynchronous; nothing when `width` or `height` is 0).
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(dst_.owner());
    ctx.keep_alive(src_.owner());
    ctx.copy_2d(dst_.address(), dst_pitch_ * sizeof(T), src_.address(), src_pitch_ * sizeof(T), width_ * sizeof(T),
                height_);
  }
  /// Reads `src`, writes `dst`: in each, one range from the first row's start to the last row's end. That includes
  /// the elements between the rows, which are not touched (an upper bound, as access.hpp says; exact when the
  /// pitch equals the width): two copies into disjoint columns of one matrix are taken to conflict.
  void accesses(AccessSet& out) const {
    out.read(src_.address(), detail::copy_2d_extent(src_pitch_, width_, height_) * sizeof(T), "copy_2d");
    out.write(dst_.address(), detail::copy_2d_extent(dst_pitch_, width_, height_) * sizeof(T), "copy_2d");
  }

 private:
  DeviceSpan<T> dst_;
  DeviceSpan<const T> src_;
  std::size_t dst_pitch_;
  std::size_t src_pitch_;
  std::size_t width_;
  std::size_t height_;
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
  /// Writes `dst` (the host side is not device memory).
  void accesses(AccessSet& out) const { out.write(dst_, "copy (host to device)"); }

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
  /// Reads `src`.
  void accesses(AccessSet& out) const { out.read(src_, "copy (device to host)"); }

 private:
  std::span<T> dst_;
  DeviceSpan<const T> src_;
};

/// Another way to move a staging copy's bytes than a memcpy node: KernelStagingCopier (kernels layer) launches a copy
/// kernel. Implementations must be usable from any thread.
class StagingCopier {
 public:
  /// Made by an implementation.
  StagingCopier() = default;
  StagingCopier(const StagingCopier&) = delete;
  StagingCopier& operator=(const StagingCopier&) = delete;
  virtual ~StagingCopier() = default;
  /// Submits a copy of `bytes` bytes from `src` to `dst` (one of them pinned host memory, addressed through unified
  /// addressing) and returns true, or returns false without submitting anything when it cannot copy these (the
  /// op then submits a memcpy).
  virtual bool copy(ExecContext& ctx, CUdeviceptr src, CUdeviceptr dst, std::size_t bytes) const = 0;
};

namespace detail {
/// The staging copy both directions share: by `copier` when it takes the bytes, else by memcpy; counted as a host
/// transfer either way.
inline void staging_copy(ExecContext& ctx, const StagingCopier* copier, bool to_device, void* host, CUdeviceptr device,
                         std::size_t bytes) {
  if (bytes == 0) return;
  const CUdeviceptr host_address = detail::host_address(host);
  if (copier != nullptr &&
      copier->copy(ctx, to_device ? host_address : device, to_device ? device : host_address, bytes)) {
    ctx.count_host_transfer(to_device ? bytes : 0, to_device ? 0 : bytes);
  } else if (to_device) {
    ctx.copy_to_device(device, host, bytes);
  } else {
    ctx.copy_to_host(host, device, bytes);
  }
}
}  // namespace detail

/// Pinned staging memory to device, made by `copy(dst, staging.cview())` (or HostIo::copy_in): a GraphNode (a
/// memcpy node, or the copier's kernel), which keeps the staging buffer alive and reads it when the copy runs (each
/// replay).
template <class T>
class [[nodiscard]] StagedUploadOp : public OpBase<StagedUploadOp<T>> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: the host side is pinned memory the graph owns a share of.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext.
  static constexpr bool builds_without_capture = true;

  /// \throws UsageError when the sizes differ.
  StagedUploadOp(DeviceSpan<T> dst, PinnedSpan<const T> src, std::shared_ptr<const StagingCopier> copier = nullptr)
      : dst_(std::move(dst)), src_(std::move(src)), copier_(std::move(copier)) {
    if (dst_.size() != src_.size()) detail::throw_size_mismatch("copy (staging to device)", dst_.size(), src_.size());
  }
  /// Submits the copy (asynchronous).
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(dst_.owner());
    ctx.keep_alive(src_.owner());
    detail::staging_copy(ctx, copier_.get(), true, const_cast<std::remove_const_t<T>*>(src_.data()), dst_.address(),
                         src_.size_bytes());
  }
  /// Reads the staging memory, writes `dst`.
  void accesses(AccessSet& out) const {
    out.read(detail::host_address(src_.data()), src_.size_bytes(), "copy (staging to device)");
    out.write(dst_, "copy (staging to device)");
  }

 private:
  DeviceSpan<T> dst_;
  PinnedSpan<const T> src_;
  std::shared_ptr<const StagingCopier> copier_;
};

/// Device to pinned staging memory, made by `copy(staging.view(), src)` (or HostIo::copy_out): a GraphNode, as
/// StagedUploadOp.
template <class T>
class [[nodiscard]] StagedDownloadOp : public OpBase<StagedDownloadOp<T>> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: the host side is pinned memory the graph owns a share of.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext.
  static constexpr bool builds_without_capture = true;

  /// \throws UsageError when the sizes differ.
  StagedDownloadOp(PinnedSpan<T> dst, DeviceSpan<const T> src, std::shared_ptr<const StagingCopier> copier = nullptr)
      : dst_(std::move(dst)), src_(std::move(src)), copier_(std::move(copier)) {
    if (dst_.size() != src_.size()) {
      detail::throw_size_mismatch("copy (device to staging)", dst_.size(), src_.size());
    }
  }
  /// Submits the copy (asynchronous: the staging memory holds the data once the stream has passed it).
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(dst_.owner());
    ctx.keep_alive(src_.owner());
    detail::staging_copy(ctx, copier_.get(), false, dst_.data(), src_.address(), dst_.size_bytes());
  }
  /// Reads `src`, writes the staging memory.
  void accesses(AccessSet& out) const {
    out.read(src_, "copy (device to staging)");
    out.write(detail::host_address(dst_.data()), dst_.size_bytes(), "copy (device to staging)");
  }

 private:
  PinnedSpan<T> dst_;
  DeviceSpan<const T> src_;
  std::shared_ptr<const StagingCopier> copier_;
};

/// Device to device; `src` may be a writable or read-only span. \throws UsageError when the sizes differ.
template <class T>
[[nodiscard]] DeviceCopyOp<T> copy(DeviceSpan<T> dst, std::type_identity_t<DeviceSpan<const T>> src) {
  static_assert(!std::is_const_v<T>,
                "copy: the destination is a read-only DeviceSpan<const T>; pass a writable view (buffer.view())");
  return {std::move(dst), std::move(src)};
}

/// Device to device in two dimensions: `height` rows of `width` elements, row r read at element `r * src_pitch` of
/// `src` and written at element `r * dst_pitch` of `dst` (pitches in elements: the row length of a row-major matrix),
/// such as a block of columns out of a matrix or into one (DeviceCopy2dOp): captured or built.
/// \throws UsageError when `width` is larger than a pitch (for more than one row), or when the last row ends past
///         the end of its span, naming the numbers.
template <class T>
[[nodiscard]] DeviceCopy2dOp<T> copy_2d(DeviceSpan<T> dst, std::size_t dst_pitch,
                                        std::type_identity_t<DeviceSpan<const T>> src, std::size_t src_pitch,
                                        std::size_t width, std::size_t height) {
  static_assert(!std::is_const_v<T>,
                "copy_2d: the destination is a read-only DeviceSpan<const T>; pass a writable view (buffer.view())");
  return {std::move(dst), dst_pitch, std::move(src), src_pitch, width, height};
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

/// Pinned staging memory to device (a GraphNode). \throws UsageError when the sizes differ.
template <class T>
[[nodiscard]] StagedUploadOp<T> copy(DeviceSpan<T> dst, std::type_identity_t<PinnedSpan<const T>> src) {
  static_assert(!std::is_const_v<T>,
                "copy: the destination is a read-only DeviceSpan<const T>; pass a writable view (buffer.view())");
  return {std::move(dst), std::move(src)};
}

/// Device to pinned staging memory (a GraphNode). \throws UsageError when the sizes differ.
template <class T>
[[nodiscard]] StagedDownloadOp<T> copy(PinnedSpan<T> dst, std::type_identity_t<DeviceSpan<const T>> src) {
  static_assert(!std::is_const_v<T>,
                "copy: the destination is a read-only PinnedSpan<const T>; pass a writable view (staging.view())");
  return {std::move(dst), std::move(src)};
}

namespace detail {
/// The element type (without const) of what copy takes as a destination or source: a DeviceSpan, PinnedSpan,
/// std::span, std::vector or std::array; void for anything else.
template <class X>
struct CopyElement {
  using type = void;
};
template <class T>
struct CopyElement<DeviceSpan<T>> {
  using type = std::remove_const_t<T>;
};
template <class T>
struct CopyElement<PinnedSpan<T>> {
  using type = std::remove_const_t<T>;
};
template <class T, std::size_t N>
struct CopyElement<std::span<T, N>> {
  using type = std::remove_const_t<T>;
};
template <class T, class A>
struct CopyElement<std::vector<T, A>> {
  using type = T;
};
template <class T, std::size_t N>
struct CopyElement<std::array<T, N>> {
  using type = T;
};
template <class X>
using copy_element_t = typename CopyElement<std::remove_cvref_t<X>>::type;
}  // namespace detail

// ---------------------------------------------------------------------------------------------------------
// READ THIS IF YOUR COMPILE BREAKS HERE: copy moves bytes between memory of one element type; it never
// converts. The static_assert below names the fix.
// ---------------------------------------------------------------------------------------------------------
/// `copy(dst, src)` between spans (or host containers) of different element types: never compiles; the
/// static_assert says to convert with a fused expression instead.
template <class Dst, class Src>
requires(!std::is_void_v<detail::copy_element_t<Dst>> && !std::is_void_v<detail::copy_element_t<Src>> &&
         !std::is_same_v<detail::copy_element_t<Dst>, detail::copy_element_t<Src>>) void copy(const Dst& /*dst*/,
                                                                                              const Src& /*src*/) {
  constexpr bool element_types_match = std::is_same_v<detail::copy_element_t<Dst>, detail::copy_element_t<Src>>;
  static_assert(element_types_match,
                "copy: the source's element type differs from the destination's, and copy never converts between "
                "element types; copy between spans of one element type, or convert on the device with a fused "
                "expression: assign(dst, cast<T>(src)) (lazygraph/kernels/expression.hpp)");
}

}  // namespace lazygraph
