// expect-error: Kernel argument N \(counted from 1; see KernelArgument<N> in this error\)
// expect-error: a read-only DeviceSpan<const T> was passed for a writable T\* parameter
// expect-error: KernelArgument<3>::ForParameterType<float ?\*>::GivenType<lazygraph::DeviceSpan<const float> ?>
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

auto misuse(const lg::Kernel<void(float, const float*, float*, int)>& axpy, const lg::DeviceBuffer<float>& x,
            const lg::DeviceBuffer<float>& y) {
  return axpy(lg::grid_for(16, 256), 2.0F, x.cview(), y.cview(), 16);  // the lazy form checks the same rule
}
