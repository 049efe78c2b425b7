// expect-error: copy: the destination is a read-only DeviceSpan<const T>
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

auto misuse(const lg::DeviceBuffer<float>& dst, const lg::DeviceBuffer<float>& src) {
  return lg::copy(dst.cview(), src.cview());
}
