// expect-error: while_ needs a LoopBound that outlives the graph: make the bound a variable, not a temporary
// reject: use of deleted function
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

auto misuse(const lg::KernelLibrary& library, lg::Condition c, lg::DeviceBuffer<unsigned>& x) {
  // The bound's counters would be freed when this statement ends, long before the graph replays.
  return lg::while_(c, lg::fill(x.view(), 1U), lg::LoopBound(library, 4));
}
