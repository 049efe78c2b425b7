// expect-error: Kernel call: the first argument must be the launch configuration
// first-error: the first argument must be the launch configuration .*grid_for
// reject: candidate
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

auto misuse(const lg::Kernel<void(float, const float*, float*, int)>& axpy, const lg::DeviceBuffer<float>& x,
            lg::DeviceBuffer<float>& y) {
  return axpy(2.0F, x.cview(), y.view(), 16);  // the LaunchConfig is missing
}
