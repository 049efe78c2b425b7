// expect-error: Scope::record accepts only DeviceOp values; this argument is not one
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Stream& s) {
  auto g = lg::CudaGraph<>::scope(s, [](lg::Scope& sc) { sc.record(42); });
}
