#pragma once
/// \file
/// How many graph captures this process has in progress. Layers that must not act during a capture (loading
/// a kernel module) read it; the graph layer moves it.

#include <atomic>

namespace lazygraph::detail {

inline std::atomic<int>& captures_in_progress() noexcept {
  static std::atomic<int> count{0};
  return count;
}

}  // namespace lazygraph::detail
