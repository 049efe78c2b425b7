// expect-error: this op \(zeros, ones, empty, dup or from_host\) allocates device memory
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Stream& s) {
  auto g = lg::CudaGraph<>::scope(s, [](lg::Scope& sc) { sc.record(lg::empty<double>(16)); });
}
