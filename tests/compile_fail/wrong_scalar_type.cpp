// expect-error: Kernel argument N \(counted from 1; see KernelArgument<N> in this error\)
// expect-error: a scalar argument must have exactly the parameter's type
// expect-error: KernelArgument<1>::ForParameterType<float>::GivenType<double>
#include <lazygraph/lazygraph.hpp>

void misuse(const lazygraph::Kernel<void(float, const float*, float*, int)>& axpy, const lazygraph::Stream& s,
            lazygraph::DeviceBuffer<float>& x, lazygraph::DeviceBuffer<float>& y) {
  axpy.launch(s, lazygraph::grid_for(16, 256), 2.0, x.cview(), y.view(), 16);  // 2.0 is a double
}
