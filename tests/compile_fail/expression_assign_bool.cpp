// expect-error: assign: the expression is a bool expression \(a comparison\); store numbers with select
// reject: element type differs from the output's
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

auto misuse(lg::DeviceSpan<lg::half> out, lg::DeviceSpan<const lg::half> a, lg::DeviceSpan<const lg::half> b) {
  return lg::assign(out, a < b);  // a bool per element into halves: select(a < b, 1.0F, 0.0F) or cast<half>(a < b)
}
