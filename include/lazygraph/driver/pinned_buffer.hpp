#pragma once
/// \file
/// PinnedBuffer<T>: page-locked host memory, so host<->device copies run asynchronously at full speed.

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "lazygraph/detail/driver/byte_count.hpp"
#include "lazygraph/detail/driver/type_name.hpp"
#include "lazygraph/driver/device.hpp"

namespace lazygraph {

namespace detail {
void* pinned_allocate(const Device& device, std::size_t bytes, std::string_view what);
void pinned_free(const Device& device, void* ptr, std::size_t bytes) noexcept;
[[noreturn]] void throw_moved_from(std::string_view what);
}  // namespace detail

/// Page-locked host memory for `size()` elements of T, uninitialised. Move-only; a moved-from buffer is empty.
template <class T>
class PinnedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "PinnedBuffer<T>: T must be trivially copyable");

 public:
  /// \throws UsageError when `size * sizeof(T)` does not fit in std::size_t; CudaError when the driver cannot
  ///         pin that much.
  PinnedBuffer(const Device& device, std::size_t size) : device_(device), size_(size), valid_(true) {
    const std::size_t bytes = detail::byte_count(size, sizeof(T), name());
    if (bytes != 0) {
      data_ =
          static_cast<T*>(detail::pinned_allocate(device, bytes, name() + " of " + std::to_string(bytes) + " bytes"));
    }
  }
  // Only a buffer holding memory frees it.
  ~PinnedBuffer() {
    if (data_ != nullptr) detail::pinned_free(device_, data_, size_ * sizeof(T));
  }
  /// Takes `o`'s memory; `o` is left moved-from (empty, `span()` throws).
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : device_(o.device_),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        valid_(std::exchange(o.valid_, false)) {}
  /// Frees this buffer's memory and takes `o`'s. Make sure no copy still in flight reads or writes it.
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      if (data_ != nullptr) detail::pinned_free(device_, data_, size_ * sizeof(T));
      device_ = o.device_;
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      valid_ = std::exchange(o.valid_, false);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  /// Elements (0 after a move).
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// False after a move.
  [[nodiscard]] bool valid() const noexcept { return valid_; }
  /// The elements, writable. \throws UsageError on a moved-from buffer.
  [[nodiscard]] std::span<T> span() { return {checked(), size_}; }
  /// The elements, read-only. \throws UsageError on a moved-from buffer.
  [[nodiscard]] std::span<const T> span() const { return {checked(), size_}; }
  /// The first element; null for zero elements or after a move (unchecked, unlike span()).
  [[nodiscard]] T* data() noexcept { return data_; }
  /// The first element, read-only; null for zero elements or after a move.
  [[nodiscard]] const T* data() const noexcept { return data_; }
  /// Element `i`, unchecked: `i` must be below size().
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  /// Element `i`, read-only and unchecked: `i` must be below size().
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  static std::string name() { return "PinnedBuffer<" + std::string(detail::type_name<T>()) + ">"; }
  T* checked() const {
    if (!valid_) [[unlikely]]
      detail::throw_moved_from(name());
    return data_;
  }

  Device device_;
  T* data_ = nullptr;
  std::size_t size_ = 0;
  bool valid_ = false;
};

}  // namespace lazygraph
