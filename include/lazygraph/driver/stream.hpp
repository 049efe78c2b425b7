#pragma once
/// \file
/// Stream and Event: move-only RAII handles. A moved-from handle is null; using it throws UsageError.

#include <cuda.h>

#include "lazygraph/driver/device.hpp"

namespace lazygraph {

class Event;

/// A non-blocking CUDA stream. Destroying it does not wait: work already submitted still completes. A stream
/// destroyed while it captures a graph ends that capture first (the capture then fails with a CaptureError).
///
/// Thread safety: a Stream may be used from any thread, also one other than the thread that created it; its
/// methods are const and the driver serialises work submitted to one stream.
class Stream {
 public:
  /// A new non-blocking stream on `device`. \throws CudaError when the driver cannot create one.
  explicit Stream(const Device& device);
  /// A stream leased from the device's pool: when this handle is destroyed the stream goes back to the pool
  /// instead of being destroyed, and the next lease reuses it. For streams that come and go often (every
  /// CudaGraph's replay stream, the side streams of `all`), where creating and destroying one costs more than
  /// the rest of a small graph's set-up. Behaves like any other Stream; work submitted to it still completes
  /// after the handle is gone, and a later lease queues behind that work.
  [[nodiscard]] static Stream pooled(const Device& device);
  ~Stream();
  /// Takes `other`'s stream; `other` is left null (its calls throw UsageError) but keeps its device().
  Stream(Stream&& other) noexcept;
  /// Gives up this stream (as the destructor does) and takes `other`'s.
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

  /// The device the stream belongs to (also after a move).
  [[nodiscard]] const Device& device() const noexcept { return device_; }
  /// The raw handle. \throws UsageError on a moved-from Stream.
  [[nodiscard]] CUstream get() const;
  /// Gives up ownership: the caller must destroy the returned stream (also a pooled one).
  [[nodiscard]] CUstream release() noexcept;
  /// Gives the stream up now, as the destructor does (without waiting), and leaves this handle null.
  void reset() noexcept;
  /// False for a moved-from, released or reset Stream.
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
  /// A new event on `device`; `timing` false makes a lighter event, which elapsed_ms cannot time.
  /// \throws CudaError when the driver cannot create one.
  explicit Event(const Device& device, bool timing = true);
  ~Event();
  /// Takes `other`'s event; `other` is left null (its calls throw UsageError).
  Event(Event&& other) noexcept;
  /// Destroys this event and takes `other`'s.
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Records the event at the current end of `stream`'s work (replacing what it recorded before).
  void record(const Stream& stream) const;
  /// Blocks until the work recorded last has completed.
  void synchronize() const;
  /// True when the work recorded last has completed (or nothing was recorded yet).
  [[nodiscard]] bool query() const;
  /// Milliseconds between two recorded timing events.
  [[nodiscard]] static float elapsed_ms(const Event& start, const Event& end);

  /// The raw handle, still owned by this object. \throws UsageError on a moved-from or reset Event.
  [[nodiscard]] CUevent get() const;
  /// The device the event belongs to.
  [[nodiscard]] const Device& device() const noexcept { return device_; }
  /// Destroys the event now and leaves this handle null.
  void reset() noexcept;
  /// False for a moved-from or reset Event.
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  Device device_;
  CUevent handle_ = nullptr;
};

/// Where a stream stands with respect to capture.
enum class CaptureStatus { none, active, invalidated };
/// \var CaptureStatus::none
/// Not capturing.
/// \var CaptureStatus::active
/// Capturing: work submitted to the stream is recorded, not run.
/// \var CaptureStatus::invalidated
/// Capturing, but an illegal call broke the capture: ending it will fail.

/// Where `stream` stands now (asks the driver): Stream::is_capturing() tells apart
/// only none from the others. \throws UsageError on a moved-from Stream.
[[nodiscard]] CaptureStatus capture_status(const Stream& stream);

}  // namespace lazygraph
