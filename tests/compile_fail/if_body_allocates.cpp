// expect-error: if_, if_else, while_ and switch_ take only GraphNode bodies
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(const lg::Stream& s) {
  auto g = lg::CudaGraph<>::scope(s, [](lg::Scope& sc) { sc.record(lg::if_(sc.condition(), lg::zeros<float>(16))); });
}
