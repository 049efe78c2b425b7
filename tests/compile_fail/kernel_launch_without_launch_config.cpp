// expect-error: Kernel::launch: the second argument must be the launch configuration
// first-error: the second argument must be the launch configuration .*grid_for
// reject: candidate
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Kernel<void(float, const float*, float*, int)>& axpy, const lg::Stream& s,
            const lg::DeviceBuffer<float>& x, lg::DeviceBuffer<float>& y) {
  axpy.launch(s, 2.0F, x.cview(), y.view(), 16);  // the LaunchConfig is missing
}
