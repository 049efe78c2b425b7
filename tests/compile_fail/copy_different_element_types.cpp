// expect-error: copy: the source's element type differs from the destination's
// first-error: copy never converts between element types.*cast<
// reject: candidate
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

auto misuse(lg::DeviceBuffer<float>& dst, const lg::DeviceBuffer<lg::half>& src) {
  return lg::copy(dst.view(), src.cview());
}
