// expect-error: DeviceScalar<T>: T must be 1, 2 or a multiple of 4 bytes wide \(at most 64\)
#include <lazygraph/lazygraph.hpp>

#include <array>

namespace lg = lazygraph;

void misuse(const lg::Stream& s) { lg::DeviceScalar<std::array<float, 17>> wide(s, {}); }
