// expect-error: Kernel argument N \(counted from 1; see KernelArgument<N> in this error\): a scalar
// expect-error: for an integer parameter pass that integer type
// expect-error: KernelArgument<4>::ForParameterType<int>::GivenType<(long unsigned int|unsigned long)>
// reject: write 2\.0f
#include <lazygraph/lazygraph.hpp>

#include <cstddef>

void misuse(const lazygraph::Kernel<void(float, const float*, float*, int)>& axpy, const lazygraph::Stream& s,
            lazygraph::DeviceBuffer<float>& x, lazygraph::DeviceBuffer<float>& y) {
  const std::size_t n = y.size();
  axpy.launch(s, lazygraph::grid_for(n, 256), 2.0F, x.cview(), y.view(), n);  // n is a std::size_t
}
