// expect-error: allow_in_graph.*HostCallOp
// The opt-in is for host calls only: it cannot wave an allocation (or any other op) into a graph.
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Stream& s) {
  auto g = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) { sc.record(lg::allow_in_graph(lg::zeros<float>(8))); });
}
