#include "lazygraph/graph/scope.hpp"

#include <string>

#include "lazygraph/detail/graph/graph_recording.hpp"

namespace lazygraph {

Condition Scope::condition(unsigned default_value) {
  if (!open_) throw_closed();
  return Condition{detail::GraphRecording::of(*ctx_, "Scope::condition").make_condition(default_value)};
}

detail::ScratchAllocation Scope::scratch_bytes(std::size_t n, std::size_t size) {
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    throw UsageError("Scope::scratch of " + std::to_string(n) + " elements of " + std::to_string(size) +
                     " bytes: the size overflows");
  }
  return detail::GraphRecording::of(*ctx_, "Scope::scratch").scratch(bytes);
}

}  // namespace lazygraph
