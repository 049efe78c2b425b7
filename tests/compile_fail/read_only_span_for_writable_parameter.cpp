// expect-error: Kernel argument N \(counted from 1; see KernelArgument<N> in this error\)
// expect-error: a read-only DeviceSpan<const T> was passed for a writable T\* parameter
// expect-error: KernelArgument<3>::ForParameterType<float ?\*>::GivenType<lazygraph::DeviceSpan<const float> ?>
#include <lazygraph/lazygraph.hpp>

void misuse(const lazygraph::Kernel<void(float, const float*, float*, int)>& axpy, const lazygraph::Stream& s,
            const lazygraph::DeviceBuffer<float>& x, const lazygraph::DeviceBuffer<float>& y) {
  axpy.launch(s, lazygraph::grid_for(16, 256), 2.0F, x.cview(), y.cview(), 16);  // y is written by axpy
}
