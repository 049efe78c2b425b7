// expect-error: `op >> f`: f is a host function, not a DeviceOp
// first-error: wrap it in host_call
// reject: candidate
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

auto misuse(lg::DeviceBuffer<float>& y) {
  return lg::fill(y.view(), 1.0F) >> [] {};
}
