#include "lazygraph/driver/stream.hpp"

#include <utility>

#include "lazygraph/detail/driver/capture.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph {

namespace drv = detail::driver;

namespace {

bool is_capture_error(int code) {
  return code == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || code == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
         code == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || code == CUDA_ERROR_CAPTURED_EVENT ||
         code == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
}

}  // namespace

Stream::Stream(const Device& device) : device_(device), handle_(drv::stream_create(device.context())) {}

Stream::Stream(const Device& device, CUstream handle, bool pooled) noexcept
    : device_(device), handle_(handle), pooled_(pooled) {}

Stream Stream::pooled(const Device& device) {
  const detail::DeviceState& state = *device.state();
  {
    const std::lock_guard<std::mutex> lock(state.stream_pool_mutex);
    if (!state.stream_pool.empty()) {
      CUstream s = state.stream_pool.back();
      state.stream_pool.pop_back();
      return {device, s, true};
    }
  }
  return {device, drv::stream_create(device.context()), true};
}

void Stream::dispose() noexcept {
  CUstream s = std::exchange(handle_, nullptr);
  if (s == nullptr) return;
  CUcontext ctx = device_.context();
  // A stream destroyed during a capture (moved out of a capture callback, say) ends the capture first, so that
  // the capture session finds it ended instead of calling the driver on a destroyed stream.
  const bool was_capturing = drv::capture_abandon_no_throw(s);
  // A stream still in a capture (one that ended in an error) is not reused: destroying it is the clean way out.
  if (pooled_ && !was_capturing && drv::capture_status_no_throw(ctx, s) == CU_STREAM_CAPTURE_STATUS_NONE) {
    const detail::DeviceState& state = *device_.state();
    try {
      const std::lock_guard<std::mutex> lock(state.stream_pool_mutex);
      state.stream_pool.push_back(s);
      return;
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory for the pool; destroy the stream instead
    }
  }
  drv::stream_destroy_no_throw(ctx, s);
}

Stream::~Stream() { dispose(); }

// device_ is copied, not moved: a moved-from Stream must keep a usable device(), because ops read
// stream.device() (to allocate, for one) before stream.get() reports the moved-from stream with UsageError.
Stream::Stream(Stream&& other) noexcept
    : device_(other.device_),  // NOLINT(performance-move-constructor-init): see above
      handle_(std::exchange(other.handle_, nullptr)),
      pooled_(std::exchange(other.pooled_, false)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    dispose();
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
    pooled_ = std::exchange(other.pooled_, false);
  }
  return *this;
}

CUstream Stream::get() const {
  if (handle_ == nullptr) [[unlikely]]
    throw UsageError("use of a moved-from or reset Stream");
  return handle_;
}

CUstream Stream::release() noexcept {
  pooled_ = false;
  return std::exchange(handle_, nullptr);
}

void Stream::reset() noexcept { dispose(); }

bool Stream::is_capturing() const {
  return drv::capture_status(device_.context(), get()) != CU_STREAM_CAPTURE_STATUS_NONE;
}

void Stream::synchronize() const {
  if (is_capturing()) {
    throw CaptureError(
        "Stream::synchronize() called on a stream that is capturing a graph: a capture records work, it does not "
        "run it, so there is nothing to wait for; wait after the capture ends (CudaGraph::launch() waits for you)");
  }
  try {
    drv::stream_synchronize(device_.context(), handle_);
  } catch (const CudaError& e) {
    if (!is_capture_error(e.code())) throw;
    throw CaptureError(std::string("Stream::synchronize() while another stream of this thread captures a graph (") +
                       e.what() + "); synchronize before the capture begins or after it ends");
  }
}

bool Stream::query() const { return drv::stream_query(device_.context(), get()); }

void Stream::wait(const Event& event) const { drv::stream_wait_event(device_.context(), get(), event.get()); }

Event::Event(const Device& device, bool timing)
    : device_(device),
      handle_(drv::event_create(device.context(), timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING)) {}

Event::~Event() { drv::event_destroy_no_throw(device_.context(), handle_); }

Event::Event(Event&& other) noexcept : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    drv::event_destroy_no_throw(device_.context(), handle_);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

CUevent Event::get() const {
  if (handle_ == nullptr) [[unlikely]]
    throw UsageError("use of a moved-from or reset Event");
  return handle_;
}

void Event::reset() noexcept { drv::event_destroy_no_throw(device_.context(), std::exchange(handle_, nullptr)); }

void Event::record(const Stream& stream) const { drv::event_record(device_.context(), get(), stream.get()); }

void Event::synchronize() const { drv::event_synchronize(device_.context(), get()); }

bool Event::query() const { return drv::event_query(device_.context(), get()); }

float Event::elapsed_ms(const Event& start, const Event& end) {
  return drv::event_elapsed_ms(start.device_.context(), start.get(), end.get());
}

CaptureStatus capture_status(const Stream& stream) {
  switch (drv::capture_status(stream.device().context(), stream.get())) {
    case CU_STREAM_CAPTURE_STATUS_ACTIVE:
      return CaptureStatus::active;
    case CU_STREAM_CAPTURE_STATUS_INVALIDATED:
      return CaptureStatus::invalidated;
    default:
      return CaptureStatus::none;
  }
}

}  // namespace lazygraph
