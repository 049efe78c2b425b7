// expect-error: run it with \.sync_on\(stream\) to get its DeviceBuffer
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse() {
  lg::DeviceBuffer<float> y = lg::zeros<float>(16);
  (void)y;
}
