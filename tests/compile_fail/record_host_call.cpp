// expect-error: record allow_in_graph\(host_call
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Stream& s) {
  auto g = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) { sc.record(lg::host_call("log", [] {})); });
}
