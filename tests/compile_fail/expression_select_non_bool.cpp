// expect-error: select\(cond, x, y\): the condition must be a bool expression
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

auto misuse(lg::DeviceSpan<float> out, lg::DeviceSpan<const float> a, lg::DeviceSpan<const float> b) {
  return lg::assign(out, lg::select(a, a, b));  // a float span as the condition: compare it (a > 0.0F) instead
}
