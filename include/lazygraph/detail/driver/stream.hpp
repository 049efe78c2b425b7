#pragma once
/// \file
/// Stream and Event: move-only RAII handles. A moved-from handle is null; using it throws UsageError.

#include <cuda.h>

#include "lazygraph/detail/driver/device.hpp"

namespace lazygraph {

class Event;

/// A non-blocking CUDA stream. Destroying it does not wait: work already submitted still completes. A stream
/// destroyed while it captures a graph ends that capture first (the capture then fails with a CaptureError).
///
/// Thread safety: a Stream may be used from any thread, also one other than the thread that created it; its
/// methods are const and the driver serialises work submitted to one stream.
class Stream {
 public:
  explicit Stream(const Device& device);
  /// A stream leased from the device's pool: when this handle is destroyed the stream goes back to the pool
  /// instead of being destroyed, and the next lease reuses it. For streams that come and go often (every
  /// CudaGraph's replay stream, the side streams of `all`), where creating and destroying one costs more than
  /// the rest of a small graph's set-up. Behaves like any other Stream; work submitted to it still completes
  /// after the handle is gone, and a later lease queues behind that work.
  [[nodiscard]] static Stream pooled(const Device& device);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /// Waits for all work on the stream.
  /// \throws CaptureError while the stream is capturing a graph (the wait would break the capture).
  void synchronize() const;
  /// True when all submitted work has finished.
  [[nodiscard]] bool query() const;
  /// Makes later work on this stream wait for `event`.
  void wait(const Event& event) const;
  /// True while the stream is capturing a graph.
  [[nodiscard]] bool is_capturing() const;

  [[nodiscard]] const Device& device() const noexcept { return device_; }
  /// The raw handle. \throws UsageError on a moved-from Stream.
  [[nodiscard]] CUstream get() const;
  /// Gives up ownership: the caller must destroy the returned stream (also a pooled one).
  [[nodiscard]] CUstream release() noexcept;
  void reset() noexcept;
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  Stream(const Device& device, CUstream handle, bool pooled) noexcept;
  /// Destroys the stream, or returns it to the device's pool when it came from there.
  void dispose() noexcept;

  Device device_;
  CUstream handle_ = nullptr;
  bool pooled_ = false;
};

/// A CUDA event, with timing unless asked otherwise.
class Event {
 public:
  explicit Event(const Device& device, bool timing = true);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream) const;
  void synchronize() const;
  /// True when the work recorded last has completed (or nothing was recorded yet).
  [[nodiscard]] bool query() const;
  /// Milliseconds between two recorded timing events.
  [[nodiscard]] static float elapsed_ms(const Event& start, const Event& end);

  [[nodiscard]] CUevent get() const;
  [[nodiscard]] const Device& device() const noexcept { return device_; }
  void reset() noexcept;
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  Device device_;
  CUevent handle_ = nullptr;
};

}  // namespace lazygraph
