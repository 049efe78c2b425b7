// expect-error: the number of arguments must equal the kernel's parameter count
#include <lazygraph/lazygraph.hpp>

void misuse(const lazygraph::Kernel<void(float, const float*, float*, int)>& axpy, const lazygraph::Stream& s,
            lazygraph::DeviceBuffer<float>& x, lazygraph::DeviceBuffer<float>& y) {
  axpy.launch(s, lazygraph::grid_for(16, 256), 2.0F, x.cview(), y.view());  // n is missing
}
