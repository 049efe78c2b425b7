#include "lazygraph/ops/host_call_errors.hpp"

#include <utility>

#include "lazygraph/driver/error.hpp"

namespace lazygraph {

void HostCallErrors::report(std::string_view name, std::exception_ptr error) noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (error_) return;
  error_ = std::move(error);
  try {
    name_.assign(name);
  } catch (...) {  // NOLINT(bugprone-empty-catch): the error itself is kept; only its label is lost
  }
  pending_.store(true, std::memory_order_release);
}

void HostCallErrors::watch(std::shared_ptr<HostCallErrors> other) {
  if (!other || other.get() == this) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& w : watched_) {
    if (w == other) return;
  }
  watched_.push_back(std::move(other));
  watching_.store(true, std::memory_order_release);
}

void HostCallErrors::rethrow_pending() {
  // Every replay asks: the common answer (nothing pending, no child graphs) costs two atomic loads, no lock.
  if (watching_.load(std::memory_order_acquire)) {
    std::vector<std::shared_ptr<HostCallErrors>> watched;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      watched = watched_;
    }
    for (const auto& w : watched) w->rethrow_pending();
  }
  if (!pending_.load(std::memory_order_acquire)) return;
  std::exception_ptr error;
  std::string name;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) return;
    error = std::exchange(error_, nullptr);
    name = std::move(name_);
    pending_.store(false, std::memory_order_relaxed);
  }
  std::string what = "an exception that is not a std::exception";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {  // NOLINT(bugprone-empty-catch): described above
  }
  throw HostCallError("host_call \"" + name + "\" threw while the stream or graph ran it: " + what);
}

}  // namespace lazygraph
