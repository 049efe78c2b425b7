// expect-error: the destination is a read-only DeviceSpan<const T>
#include <lazygraph/lazygraph.hpp>

void misuse(const lazygraph::Stream& s, const lazygraph::DeviceBuffer<float>& dst,
            const lazygraph::DeviceBuffer<float>& src) {
  lazygraph::copy_async(s, dst.cview(), src.cview());
}
