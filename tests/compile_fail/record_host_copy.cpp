// expect-error: this op copies to or from host memory
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Stream& s, lg::DeviceBuffer<float>& b, const std::vector<float>& host) {
  auto g = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) { sc.record(lg::copy(b.view(), host)); });
}
