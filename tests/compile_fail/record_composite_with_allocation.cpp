// expect-error: this composite contains an op that allocates device memory
// reject: is_graph_node
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Stream& s, lg::DeviceBuffer<float>& b) {
  auto g = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) {
    sc.record(lg::fill(b.view(), 1.0F) >> lg::all(lg::fill(b.view(), 2.0F), lg::zeros<float>(8)));
  });
}
