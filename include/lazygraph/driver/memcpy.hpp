#pragma once
/// \file
/// Size-checked asynchronous copies between host and device memory and within the device, and 2-D copies of
/// rows between two pitches within the device (copy_2d_async).
///
/// Host memory that is not pinned (a std::vector, say) is staged by the driver: the call returns once the
/// source has been read, so the host buffer may be reused at once, but the copy does not overlap host work.
/// PinnedBuffer memory is copied asynchronously: keep it unchanged until the stream has passed the copy.
///
/// The element type comes from the destination; the source converts to it (a writable DeviceSpan or a
/// std::vector converts to the read-only source parameter).

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "lazygraph/driver/device_span.hpp"
#include "lazygraph/driver/stream.hpp"

namespace lazygraph {

namespace detail {
[[noreturn]] void throw_size_mismatch(std::string_view what, std::size_t dst, std::size_t src);
void copy_h2d(const Stream& s, CUdeviceptr dst, const void* src, std::size_t bytes);
void copy_d2h(const Stream& s, void* dst, CUdeviceptr src, std::size_t bytes);
void copy_d2d(const Stream& s, CUdeviceptr dst, CUdeviceptr src, std::size_t bytes);
/// The elements the rows of a 2-D copy span in one of its two memories, from the first row's start to the last
/// row's end: `(height - 1) * pitch + width`, 0 when `width` or `height` is 0. Only for a shape check_copy_2d took.
[[nodiscard]] constexpr std::size_t copy_2d_extent(std::size_t pitch, std::size_t width, std::size_t height) noexcept {
  return width == 0 || height == 0 ? 0 : (height - 1) * pitch + width;
}
/// Checks a 2-D copy of `height` rows of `width` elements, `dst_pitch` and `src_pitch` elements apart, between spans
/// of `dst_size` and `src_size` elements. \throws UsageError, naming `what`, when a row is longer than its pitch
/// or the last row ends past the end of its span. Nothing is checked when `width` or `height` is 0.
void check_copy_2d(std::string_view what, std::size_t dst_size, std::size_t dst_pitch, std::size_t src_size,
                   std::size_t src_pitch, std::size_t width, std::size_t height);
/// Submits a 2-D device-to-device copy (all in bytes; a shape check_copy_2d took, not empty).
void copy_d2d_2d(const Stream& s, CUdeviceptr dst, std::size_t dst_pitch, CUdeviceptr src, std::size_t src_pitch,
                 std::size_t width, std::size_t height);
}  // namespace detail

/// Device to device. \throws UsageError when the sizes differ.
template <class T>
void copy_async(const Stream& stream, DeviceSpan<T> dst, std::type_identity_t<DeviceSpan<const T>> src) {
  static_assert(!std::is_const_v<T>,
                "copy_async: the destination is a read-only DeviceSpan<const T>; pass view(), not cview()");
  if (dst.size() != src.size()) detail::throw_size_mismatch("device-to-device copy", dst.size(), src.size());
  if (!dst.empty()) detail::copy_d2d(stream, dst.address(), src.address(), dst.size_bytes());
}

/// Device to device in two dimensions: `height` rows of `width` elements, row r read at element `r * src_pitch` of
/// `src` and written at element `r * dst_pitch` of `dst` (pitches in elements: the row length of a row-major
/// matrix). Copies a block of columns out of a matrix or into one; the elements between the rows are neither read
/// nor written. Nothing is submitted when `width` or `height` is 0.
/// \throws UsageError when `width` is larger than a pitch (for more than one row), or when the last row ends past
///         the end of its span, naming the numbers.
/// \throws CudaError when the driver refuses the copy (a pitch in bytes above CU_DEVICE_ATTRIBUTE_MAX_PITCH).
template <class T>
void copy_2d_async(const Stream& stream, DeviceSpan<T> dst, std::size_t dst_pitch,
                   std::type_identity_t<DeviceSpan<const T>> src, std::size_t src_pitch, std::size_t width,
                   std::size_t height) {
  static_assert(!std::is_const_v<T>,
                "copy_2d_async: the destination is a read-only DeviceSpan<const T>; pass view(), not cview()");
  detail::check_copy_2d("copy_2d_async", dst.size(), dst_pitch, src.size(), src_pitch, width, height);
  if (width == 0 || height == 0) return;
  // One row: the pitches are not used, and the driver gets the row length for them (any pitch is valid then).
  detail::copy_d2d_2d(stream, dst.address(), (height == 1 ? width : dst_pitch) * sizeof(T), src.address(),
                      (height == 1 ? width : src_pitch) * sizeof(T), width * sizeof(T), height);
}

/// Host to device. \throws UsageError when the sizes differ.
template <class T>
void copy_async(const Stream& stream, DeviceSpan<T> dst, std::type_identity_t<std::span<const T>> src) {
  static_assert(!std::is_const_v<T>,
                "copy_async: the destination is a read-only DeviceSpan<const T>; pass view(), not cview()");
  if (dst.size() != src.size()) detail::throw_size_mismatch("host-to-device copy", dst.size(), src.size());
  if (!dst.empty()) detail::copy_h2d(stream, dst.address(), src.data(), dst.size_bytes());
}

/// Device to host. \throws UsageError when the sizes differ.
template <class T>
void copy_async(const Stream& stream, std::span<T> dst, std::type_identity_t<DeviceSpan<const T>> src) {
  static_assert(!std::is_const_v<T>, "copy_async: the host destination is const");
  if (dst.size() != src.size()) detail::throw_size_mismatch("device-to-host copy", dst.size(), src.size());
  if (!dst.empty()) detail::copy_d2h(stream, dst.data(), src.address(), src.size_bytes());
}

}  // namespace lazygraph
