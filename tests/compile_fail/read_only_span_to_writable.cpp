// expect-error: (conversion from|could not convert|no viable conversion|no matching).*DeviceSpan
#include <lazygraph/lazygraph.hpp>

lazygraph::DeviceSpan<float> misuse(const lazygraph::DeviceBuffer<float>& b) {
  lazygraph::DeviceSpan<float> writable = b.cview();  // a read-only view never becomes writable
  return writable;
}
