// expect-error: Kernel argument N \(counted from 1; see KernelArgument<N> in this error\)
// expect-error: a pointer parameter takes a DeviceSpan
// expect-error: KernelArgument<2>::ForParameterType<const float ?\*>::GivenType<const float ?\*>
#include <lazygraph/lazygraph.hpp>

void misuse(const lazygraph::Kernel<void(float, const float*, float*, int)>& axpy, const lazygraph::Stream& s,
            const float* x, lazygraph::DeviceBuffer<float>& y) {
  axpy.launch(s, lazygraph::grid_for(16, 256), 2.0F, x, y.view(), 16);  // a raw pointer carries no size or owner
}
