#pragma once
/// \file
/// DeviceSpan<T>: a view of device memory. DeviceSpan<const T> is read-only: a writable span converts to a
/// read-only one, never the reverse, so a kernel parameter that writes cannot be handed a read-only view.
///
/// A span made from a DeviceBuffer shares ownership of the allocation (`owner()`), which is how a captured
/// graph keeps every buffer it touches alive. Copying a span costs an atomic increment; nothing on the replay
/// path copies spans.

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>

#include "lazygraph/driver/error.hpp"

namespace lazygraph {

/// `size()` elements of T in device memory: writable for DeviceSpan<T>, read-only for DeviceSpan<const T>.
///
/// A span does not check that its memory is alive: one with an owner keeps it so; one without (made from a raw
/// address) is the caller's to keep valid. Nothing is bounds-checked on the device.
template <class T>
class DeviceSpan {
  static_assert(std::is_trivially_copyable_v<std::remove_const_t<T>>,
                "DeviceSpan<T>: T must be trivially copyable, since device memory is copied bytewise");

 public:
  /// T, const for a read-only span.
  using element_type = T;
  /// T without const.
  using value_type = std::remove_const_t<T>;

  /// An empty span: null address, no elements, no owner.
  DeviceSpan() = default;
  /// A view of `size` elements at `address`. `owner` (may be null) keeps the memory alive while this span, or
  /// a graph that recorded it, lives; a span without owner is the caller's to keep valid.
  DeviceSpan(CUdeviceptr address, std::size_t size, std::shared_ptr<const void> owner = nullptr) noexcept
      : address_(address), size_(size), owner_(std::move(owner)) {}

  /// A writable span converts to a read-only one. The reverse does not exist.
  template <class U>
  requires(std::is_const_v<T>&& std::is_same_v<U, std::remove_const_t<T>>) DeviceSpan(const DeviceSpan<U>& other)
  noexcept  // NOLINT(google-explicit-constructor): the safe direction
      : address_(other.address()), size_(other.size()), owner_(other.owner()) {}

  /// The number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// `size() * sizeof(T)`.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// True for zero elements.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// The device address of the first element.
  [[nodiscard]] CUdeviceptr address() const noexcept { return address_; }
  /// The device pointer, for passing to a kernel; never dereference it on the host.
  [[nodiscard]] T* data() const noexcept {
    return reinterpret_cast<T*>(address_);  // NOLINT(performance-no-int-to-ptr): a device address, by design
  }
  /// What keeps the memory alive (the buffer's allocation); null for a span made from a raw address.
  [[nodiscard]] const std::shared_ptr<const void>& owner() const noexcept { return owner_; }

  /// The same elements, read-only.
  [[nodiscard]] DeviceSpan<const T> as_const() const noexcept { return {address_, size_, owner_}; }

  /// Elements [offset, offset + count). \throws UsageError when that range leaves the span.
  [[nodiscard]] DeviceSpan subspan(std::size_t offset, std::size_t count) const {
    if (offset > size_ || count > size_ - offset) {
      throw UsageError("DeviceSpan::subspan(" + std::to_string(offset) + ", " + std::to_string(count) +
                       ") is out of range for a span of " + std::to_string(size_) + " elements");
    }
    return {address_ + offset * sizeof(T), count, owner_};
  }

 private:
  CUdeviceptr address_ = 0;
  std::size_t size_ = 0;
  std::shared_ptr<const void> owner_;
};

}  // namespace lazygraph
