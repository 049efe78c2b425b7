#pragma once
/// \file
/// StagingBuffer<T> and PinnedSpan<T>: page-locked host memory that graphs copy to and from. A graph that records
/// a copy from or to a PinnedSpan (ops/copy.hpp) keeps the buffer alive and reads or writes it on every replay, so
/// host I/O becomes part of the graph: write the input into the buffer, replay, wait once, read the output.
///
/// What the types cannot enforce: the host must not touch a staging buffer while a replay that copies from or to
/// it may run (write before the launch, read after the wait).

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/pinned_buffer.hpp"

namespace lazygraph {

/// A view of pinned host memory with the owner that keeps it alive (as DeviceSpan is for device memory). Made by
/// StagingBuffer::view / cview; `T` is const for a read-only view.
template <class T>
class PinnedSpan {
 public:
  /// An empty span.
  PinnedSpan() noexcept = default;
  /// `size` elements at `data`, kept alive by `owner`.
  PinnedSpan(T* data, std::size_t size, std::shared_ptr<const void> owner) noexcept
      : data_(data), size_(size), owner_(std::move(owner)) {}
  /// A writable span converts to a read-only one.
  template <class U>
  requires std::is_same_v<const U, T> &&(!std::is_same_v<U, T>)
      PinnedSpan(const PinnedSpan<U>& other) noexcept  // NOLINT(google-explicit-constructor): like std::span
      : data_(other.data()), size_(other.size()), owner_(other.owner()) {}

  /// The first element.
  [[nodiscard]] T* data() const noexcept { return data_; }
  /// The number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The size in bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// The elements, for the host to read or write (between replays).
  [[nodiscard]] std::span<T> span() const noexcept { return {data_, size_}; }
  /// What keeps the memory alive.
  [[nodiscard]] const std::shared_ptr<const void>& owner() const noexcept { return owner_; }
  /// `count` elements from `offset`, with the same owner. \throws UsageError when they do not fit.
  [[nodiscard]] PinnedSpan subspan(std::size_t offset, std::size_t count) const {
    if (offset > size_ || count > size_ - offset) {
      throw UsageError("PinnedSpan::subspan(" + std::to_string(offset) + ", " + std::to_string(count) +
                       ") is out of range for a span of " + std::to_string(size_) + " elements");
    }
    return {data_ + offset, count, owner_};
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::shared_ptr<const void> owner_;
};

/// Pinned host memory for `size()` elements of T, shared by the graphs that copy from or to it (each keeps it
/// alive). Copying a StagingBuffer copies the handle, not the memory.
template <class T>
class StagingBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "StagingBuffer<T>: T must be trivially copyable");

 public:
  /// \throws CudaError when the driver cannot pin that much; UsageError when the size overflows.
  StagingBuffer(const Device& device, std::size_t size) : memory_(std::make_shared<PinnedBuffer<T>>(device, size)) {}

  /// Elements.
  [[nodiscard]] std::size_t size() const noexcept { return memory_->size(); }
  /// The elements, for the host (write inputs before a replay, read outputs after its wait).
  [[nodiscard]] std::span<T> span() const noexcept { return {memory_->data(), memory_->size()}; }
  /// A writable view, for a copy into it (device to host).
  [[nodiscard]] PinnedSpan<T> view() const noexcept { return {memory_->data(), memory_->size(), memory_}; }
  /// A read-only view, for a copy out of it (host to device).
  [[nodiscard]] PinnedSpan<const T> cview() const noexcept { return {memory_->data(), memory_->size(), memory_}; }

 private:
  std::shared_ptr<PinnedBuffer<T>> memory_;
};

}  // namespace lazygraph
