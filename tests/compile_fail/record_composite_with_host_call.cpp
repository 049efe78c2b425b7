// expect-error: this op \(or a part of it\) is a host_call.*record allow_in_graph\(host_call
// reject: does not declare itself one
// A host_call inside a composite is refused like a bare one, with the same fix named.
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Stream& s, lg::DeviceBuffer<float>& b) {
  auto g = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) {
    sc.record(lg::fill(b.view(), 1.0F) >> lg::all(lg::fill(b.view(), 2.0F), lg::host_call("log", [] {})));
  });
}
