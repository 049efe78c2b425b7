#include "lazygraph/graph/graph_pool.hpp"

#include <algorithm>

#include "lazygraph/detail/driver/driver_api.hpp"

namespace lazygraph {

namespace drv = detail::driver;

GraphMemoryUsage graph_memory_usage(const Device& device) {
  const drv::GraphMemory m = drv::graph_memory(device.context(), device.state()->device);
  return {m.used, m.used_peak, m.reserved, m.reserved_peak};
}

std::size_t GraphPool::graph_count() const {
  const std::lock_guard<std::mutex> lock(state_->accounts_mutex);
  return state_->scratch_bytes.size();
}

std::size_t GraphPool::largest_scratch_bytes() const {
  const std::lock_guard<std::mutex> lock(state_->accounts_mutex);
  std::size_t largest = 0;
  for (const auto& [graph, bytes] : state_->scratch_bytes) largest = std::max(largest, bytes);
  return largest;
}

std::size_t GraphPool::total_scratch_bytes() const {
  const std::lock_guard<std::mutex> lock(state_->accounts_mutex);
  std::size_t total = 0;
  for (const auto& [graph, bytes] : state_->scratch_bytes) total += bytes;
  return total;
}

void GraphPool::trim() {
  state_->stream->synchronize();
  drv::graph_memory_trim(device().context(), device().state()->device);
}

void GraphPool::reset_peaks() { drv::graph_memory_reset_peaks(device().context(), device().state()->device); }

}  // namespace lazygraph
