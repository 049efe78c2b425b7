// expect-error: use of deleted function
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

// A CudaGraph is move-only: two copies would share one graph's replays and updates.
void misuse(lg::CudaGraph<>& g) { lg::CudaGraph<> copy = g; }
