#include "lazygraph/detail/driver/deferred_release.hpp"

#include <utility>

namespace lazygraph::detail {

void DeferredRelease::hold(const Stream& stream, Owners owners) {
  if (owners.empty()) return;
  try {
    Event done = spare_.empty() ? Event(stream.device(), false) : std::move(spare_.back());
    if (!spare_.empty()) spare_.pop_back();
    done.record(stream);
    batches_.push_back({std::move(done), std::move(owners)});
  } catch (...) {
    for (auto& o : owners) unordered_.push_back(std::move(o));
    throw;
  }
}

void DeferredRelease::collect() {
  // Events of one stream complete in the order they were recorded, so the first unfinished one ends the scan.
  while (!batches_.empty() && batches_.front().done.query()) {
    spare_.push_back(std::move(batches_.front().done));
    batches_.pop_front();
  }
}

void DeferredRelease::release_all() noexcept {
  while (!batches_.empty()) {
    try {
      spare_.push_back(std::move(batches_.front().done));
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory for the spare list; the event is destroyed
    }
    batches_.pop_front();
  }
  unordered_.clear();
}

}  // namespace lazygraph::detail
