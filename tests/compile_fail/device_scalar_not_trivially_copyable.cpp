// expect-error: DeviceScalar<T>: T must be trivially copyable
#include <lazygraph/lazygraph.hpp>

#include <memory>

namespace lg = lazygraph;

void misuse(const lg::Stream& s) { lg::DeviceScalar<std::shared_ptr<int>> owning(s, nullptr); }
