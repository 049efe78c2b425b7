#pragma once
/// \file
/// DeviceBuffer<T>: owning, move-only, typed device memory.

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "lazygraph/detail/driver/byte_count.hpp"
#include "lazygraph/detail/driver/type_name.hpp"
#include "lazygraph/driver/device.hpp"
#include "lazygraph/driver/device_span.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph {

namespace detail {

/// One device allocation, freed when the last owner (buffer, span or graph) lets go.
class Allocation {
 public:
  Allocation(const Device& device, std::size_t bytes, std::string_view what);
  /// Memory another owner allocated and frees (`keep`, held as long as this allocation): never freed here.
  Allocation(const Device& device, CUdeviceptr address, std::size_t bytes, std::shared_ptr<const void> keep) noexcept;
  ~Allocation();
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  [[nodiscard]] CUdeviceptr address() const noexcept { return address_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

 private:
  Device device_;
  CUdeviceptr address_ = 0;
  std::size_t bytes_ = 0;
  std::shared_ptr<const void> keep_;  ///< the other owner of adopted memory, else null (freed here)
};

[[noreturn]] void throw_moved_from(std::string_view what);

}  // namespace detail

/// Device memory for `size()` elements of T. Zero elements is allowed (no allocation is made).
///
/// Allocation is synchronous (cuMemAlloc) and must happen outside graph captures; the `zeros`, `empty`, ...
/// ops are the usual way to make one. The memory is uninitialised. A moved-from buffer is empty and any use
/// of its views throws UsageError.
///
/// Thread safety: distinct buffers may be used from distinct threads; one buffer is not synchronised.
template <class T>
class DeviceBuffer {
  static_assert(!std::is_const_v<T>, "DeviceBuffer<const T> is not a thing: make a DeviceBuffer<T> and take cview()");

 public:
  /// \throws UsageError when `size * sizeof(T)` does not fit in std::size_t; CudaError
  ///         (CUDA_ERROR_OUT_OF_MEMORY, naming the buffer) when the device cannot hold it.
  DeviceBuffer(const Device& device, std::size_t size)
      : storage_(std::make_shared<detail::Allocation>(
            device, detail::byte_count(size, sizeof(T), "DeviceBuffer<" + std::string(detail::type_name<T>()) + ">"),
            describe(size))),
        size_(size) {}

  /// A buffer over the memory of `memory`, which its owner (memory.owner(), e.g. a SymmetricBuffer's allocation)
  /// keeps alive as long as the buffer, its views or a graph that recorded them live, and frees itself: device code
  /// that takes a DeviceBuffer can then work in memory lazygraph did not allocate. \throws UsageError for a span
  /// without an owner (nothing would keep the memory alive).
  static DeviceBuffer adopt(const Device& device, DeviceSpan<T> memory) {
    if (memory.owner() == nullptr) {
      throw UsageError("DeviceBuffer::adopt: the span has no owner to keep its memory alive");
    }
    return DeviceBuffer(
        std::make_shared<detail::Allocation>(device, memory.address(), memory.size() * sizeof(T), memory.owner()),
        memory.size());
  }

  /// Takes `other`'s memory; `other` is left moved-from (empty, its views throw).
  DeviceBuffer(DeviceBuffer&& other) noexcept : storage_(std::move(other.storage_)), size_(other.size_) {
    other.size_ = 0;
  }
  /// Lets go of this buffer's memory (freed when no span or graph still holds it) and takes `other`'s.
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    storage_ = std::move(other.storage_);
    size_ = other.size_;
    other.size_ = 0;
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() = default;

  /// Elements (0 after a move).
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// `size() * sizeof(T)`.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// True for zero elements, as after a move.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// False after a move.
  [[nodiscard]] bool valid() const noexcept { return storage_ != nullptr; }

  /// A writable view. \throws UsageError on a moved-from buffer.
  [[nodiscard]] DeviceSpan<T> view() { return {checked().address(), size_, storage_}; }
  /// A read-only view. \throws UsageError on a moved-from buffer.
  [[nodiscard]] DeviceSpan<const T> cview() const { return {checked().address(), size_, storage_}; }

  /// Frees the memory now (when no graph or span still holds it) and leaves the buffer moved-from.
  void reset() noexcept {
    storage_.reset();
    size_ = 0;
  }

  /// "DeviceBuffer<float> of 1024 elements (4096 bytes)".
  [[nodiscard]] static std::string describe(std::size_t size) {
    return "DeviceBuffer<" + std::string(detail::type_name<T>()) + "> of " + std::to_string(size) + " elements (" +
           std::to_string(size * sizeof(T)) + " bytes)";  // checked before it is called
  }

 private:
  const detail::Allocation& checked() const {
    if (!storage_) [[unlikely]]
      detail::throw_moved_from("DeviceBuffer<" + std::string(detail::type_name<T>()) + ">");
    return *storage_;
  }

  DeviceBuffer(std::shared_ptr<detail::Allocation> storage, std::size_t size)
      : storage_(std::move(storage)), size_(size) {}

  std::shared_ptr<detail::Allocation> storage_;
  std::size_t size_ = 0;
};

}  // namespace lazygraph
