#pragma once
/// \file
/// Size-checked asynchronous copies between host and device memory and within the device.
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
#include <type_traits>

#include "lazygraph/detail/driver/device_span.hpp"
#include "lazygraph/detail/driver/stream.hpp"

namespace lazygraph {

namespace detail {
[[noreturn]] void throw_size_mismatch(std::string_view what, std::size_t dst, std::size_t src);
void copy_h2d(const Stream& s, CUdeviceptr dst, const void* src, std::size_t bytes);
void copy_d2h(const Stream& s, void* dst, CUdeviceptr src, std::size_t bytes);
void copy_d2d(const Stream& s, CUdeviceptr dst, CUdeviceptr src, std::size_t bytes);
}  // namespace detail

/// Device to device. \throws UsageError when the sizes differ.
template <class T>
void copy_async(const Stream& stream, DeviceSpan<T> dst, std::type_identity_t<DeviceSpan<const T>> src) {
  static_assert(!std::is_const_v<T>,
                "copy_async: the destination is a read-only DeviceSpan<const T>; pass view(), not cview()");
  if (dst.size() != src.size()) detail::throw_size_mismatch("device-to-device copy", dst.size(), src.size());
  if (!dst.empty()) detail::copy_d2d(stream, dst.address(), src.address(), dst.size_bytes());
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
