// child_graph: a graph embedded in another as one node.
#include <doctest/doctest.h>

#include <memory>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(BuildableNode<ChildGraphOp>);

TEST_SUITE("gpu") {
  TEST_CASE("a child graph runs inside a captured or built parent, which keeps its buffers alive") {
    Stream& s = lgtest::stream();
    const int n = 50'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    auto axpy = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    for (const bool built : {true, false}) {
      CAPTURE(built);
      DeviceBuffer<float> out = zeros<float>(n).sync_on(s);
      std::optional<CudaGraph<>> parent;
      {
        auto dx = std::make_unique<DeviceBuffer<float>>(from_host(x).sync_on(s));
        auto dy = std::make_unique<DeviceBuffer<float>>(from_host(y0).sync_on(s));
        auto child = CudaGraph<>::build(s.device(), axpy(grid_for(n, 256), 0.5F, dx->cview(), dy->view(), n));
        auto op = child_graph(child) >> copy(out.view(), dy->cview());
        parent.emplace(built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op));
        const auto kinds = parent->node_kinds();
        CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::child_graph) == 1);
        // child, dx and dy go out of scope here: the parent must keep what the child's nodes use.
      }
      parent->launch();
      parent->launch();
      CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), lgtest::axpy_reference(0.5F, x, y0, 2)) < 1e-6);
    }
  }

  TEST_CASE("child_graph run eagerly replays the graph on the stream") {
    Stream& s = lgtest::stream();
    const int n = 10'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    DeviceBuffer<float> dx = from_host(x).sync_on(s);
    DeviceBuffer<float> dy = from_host(y0).sync_on(s);
    auto axpy = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    auto g = CudaGraph<>::capture(s, axpy(grid_for(n, 256), 2.0F, dx.cview(), dy.view(), n));
    child_graph(g).sync_on(s);
    child_graph(g).sync_on(s);
    CHECK(g.replay_count() == 2);
    CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), lgtest::axpy_reference(2.0F, x, y0, 2)) < 1e-6);
  }
}
