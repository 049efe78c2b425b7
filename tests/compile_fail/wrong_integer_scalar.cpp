// expect-error: for an integer parameter pass that integer type
// reject: write 2\.0f
#include <lazygraph/lazygraph.hpp>

#include <cstddef>

void misuse(const lazygraph::Kernel<void(float, const float*, float*, int)>& axpy, const lazygraph::Stream& s,
            lazygraph::DeviceBuffer<float>& x, lazygraph::DeviceBuffer<float>& y) {
  const std::size_t n = y.size();
  axpy.launch(s, lazygraph::grid_for(n, 256), 2.0F, x.cview(), y.view(), n);  // n is a std::size_t
}
