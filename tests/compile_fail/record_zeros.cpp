// expect-error: this op \(zeros, ones, empty, dup or from_host\) allocates device memory
// reject: is_graph_node
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Stream& s) {
  auto g = lg::CudaGraph<>::scope(s, [](lg::Scope& sc) { sc.record(lg::zeros<float>(16)); });
}
