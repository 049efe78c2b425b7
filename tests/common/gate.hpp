#pragma once
// A gate a test closes on a stream: the stream's later work waits until the test opens it (a host function that
// blocks until then). Lets a test check what waits for what without relying on timing.

#include <atomic>
#include <chrono>
#include <thread>

#include <lazygraph/detail/driver/driver_api.hpp>

#include "common/gpu.hpp"

namespace lgtest {

class Gate {
 public:
  Gate() = default;
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  /// Opens the gate and waits until every host function it put on a stream has returned (they point at it).
  ~Gate() {
    open();
    while (pending_.load() != 0) std::this_thread::yield();
  }

  /// Makes the work submitted to `stream` after this call wait until open().
  void close_on(const lazygraph::Stream& stream) {
    pending_.fetch_add(1);
    try {
      lazygraph::detail::driver::launch_host_function(stream.device().context(), stream.get(), &wait, this);
    } catch (...) {
      pending_.fetch_sub(1);
      throw;
    }
  }
  /// Lets the work behind the gate run.
  void open() noexcept { open_.store(true); }

 private:
  static void CUDA_CB wait(void* data) {
    auto* self = static_cast<Gate*>(data);
    while (!self->open_.load()) std::this_thread::yield();
    self->pending_.fetch_sub(1);
  }

  std::atomic<bool> open_{false};
  std::atomic<int> pending_{0};
};

/// True when `done()` becomes true within `limit`, polled; false otherwise.
template <class F>
bool becomes_true_within(F&& done, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace lgtest
