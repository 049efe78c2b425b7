// expect-error: Kernel argument N \(counted from 1; see KernelArgument<N> in this error\)
// expect-error: the DeviceSpan's element type differs from the pointer parameter's
// expect-error: KernelArgument<2>::ForParameterType<const float ?\*>::GivenType<lazygraph::DeviceSpan<const int> ?>
#include <lazygraph/lazygraph.hpp>

void misuse(const lazygraph::Kernel<void(float, const float*, float*, int)>& axpy, const lazygraph::Stream& s,
            lazygraph::DeviceBuffer<int>& x, lazygraph::DeviceBuffer<float>& y) {
  axpy.launch(s, lazygraph::grid_for(16, 256), 2.0F, x.cview(), y.view(), 16);  // ints where floats are read
}
