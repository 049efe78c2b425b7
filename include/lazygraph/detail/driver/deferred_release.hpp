#pragma once
/// \file
/// DeferredRelease: keeps the owners of memory that submitted GPU work uses alive until that work has
/// completed, then lets them go — without ever making the host wait. Each `hold` records an event on the
/// stream; `collect` releases every batch whose event has completed (a cheap query each), oldest first.
///
/// All holds of one DeferredRelease go to one stream (its events complete in the order they were recorded).
///
/// Thread safety: none; its owner (a graph) serialises calls.

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "lazygraph/driver/stream.hpp"

namespace lazygraph::detail {

class DeferredRelease {
 public:
  using Owners = std::vector<std::shared_ptr<const void>>;

  /// Keeps `owners` until the work submitted to `stream` so far has completed. Nothing is recorded for an
  /// empty list. \throws CudaError when the event cannot be made or recorded (the owners are then kept until
  /// release_all).
  void hold(const Stream& stream, Owners owners);
  /// Releases the batches whose work has completed. Never waits.
  void collect();
  /// Releases everything; for when the caller knows all held work has completed (it waited for it).
  void release_all() noexcept;
  /// Batches still held.
  [[nodiscard]] std::size_t held() const noexcept { return batches_.size() + (unordered_.empty() ? 0 : 1); }

 private:
  struct Batch {
    Event done;
    Owners owners;
  };
  std::deque<Batch> batches_;
  std::vector<Event> spare_;  ///< events of released batches, reused
  Owners unordered_;          ///< owners whose event could not be recorded: kept until release_all
};

}  // namespace lazygraph::detail
