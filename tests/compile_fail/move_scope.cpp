// expect-error: (use of deleted function|call to deleted constructor).*Scope
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Stream& s) {
  auto g = lg::CudaGraph<>::scope(s, [](lg::Scope& sc) {
    lg::Scope kept = std::move(sc);
    (void)kept;
  });
}
