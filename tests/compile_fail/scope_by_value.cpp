// expect-error: the callback must be callable with `Scope&`
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Stream& s) {
  auto g = lg::CudaGraph<>::scope(s, [](lg::Scope sc) { (void)sc; });
}
