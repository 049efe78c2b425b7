// Programmatic dependent launch (LaunchConfig::early_launch): kernels that call lg::wait_for_prior_grids() keep
// stream order when launched early, eagerly and inside graphs, mixed with ordinary launches.
#include <doctest/doctest.h>

#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

using AddInplace = Kernel<void(half*, const half*, int)>;

/// x = i for every element, as fp16 (exact up to 2048).
std::vector<half> counting(int n) {
  std::vector<half> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = half::from_float(static_cast<float>(i % 512));
  return v;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a chain of early-launched dependent kernels keeps stream order, eagerly and in a graph") {
    Stream& s = lgtest::stream();
    const auto add = lgtest::kernels().get<void(half*, const half*, int)>("add_inplace");
    const int n = 1 << 16;  // many blocks: a kernel that started before its predecessor finished would see it
    const int steps = 300;
    const std::vector<half> start = counting(n);
    auto x = lgtest::to_device(s, start);
    const auto one = lgtest::to_device(s, std::vector<half>(static_cast<std::size_t>(n), half::from_float(1.0F)));
    const auto cfg = early(grid_for(static_cast<std::size_t>(n), 256));

    std::vector<decltype(add(cfg, x.view(), one.cview(), n))> ops;
    ops.reserve(steps);
    for (int i = 0; i < steps; ++i) {
      // Every tenth launch is an ordinary one: mixed edges must keep order too.
      ops.push_back(add(i % 10 == 9 ? grid_for(static_cast<std::size_t>(n), 256) : cfg, x.view(), one.cview(), n));
    }
    const auto step = chain(ops);

    const auto expect = [&](int rounds) {
      const std::vector<half> got = lgtest::to_host(s, x.cview());
      std::size_t wrong = 0;
      for (int i = 0; i < n; ++i) {
        const float want = static_cast<float>(i % 512 + rounds * steps);
        wrong += got[static_cast<std::size_t>(i)].to_float() == want ? 0 : 1;
      }
      CHECK(wrong == 0);
    };
    step.sync_on(s);
    expect(1);
    auto graph = CudaGraph<>::capture(s, step);
    CHECK(graph.node_count() == static_cast<std::size_t>(steps));
    // Early launches are programmatic edges, except after the ordinary launches; the first node has no edge.
    const EdgeCounts edges = graph.edge_counts();
    CHECK(edges.full == static_cast<std::size_t>(steps / 10));
    CHECK(edges.programmatic == static_cast<std::size_t>(steps - 1 - steps / 10));
    graph.launch();
    graph.launch();
    expect(3);
  }
}
