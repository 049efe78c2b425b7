// expect-error: a read-only DeviceSpan<const T> was passed for a writable T\* parameter
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

auto misuse(const lg::Kernel<void(float, const float*, float*, int)>& axpy, const lg::DeviceBuffer<float>& x,
            const lg::DeviceBuffer<float>& y) {
  return axpy(lg::grid_for(16, 256), 2.0F, x.cview(), y.cview(), 16);  // the lazy form checks the same rule
}
