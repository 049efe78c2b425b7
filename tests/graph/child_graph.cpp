// child_graph: a graph embedded in another as one node.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(BuildableNode<ChildGraphOp>);

namespace {

using lgtest::axpy;

CudaGraph<> record_graph(bool built, const auto& op) {
  return built ? CudaGraph<>::build(lgtest::device(), op) : CudaGraph<>::capture(lgtest::stream(), op);
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a child graph runs inside a captured or built parent, which keeps its buffers alive") {
    Stream& s = lgtest::stream();
    const int n = 50'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    const auto k = axpy();
    for (const bool child_built : {true, false}) {
      for (const bool built : {true, false}) {
        CAPTURE(child_built);
        CAPTURE(built);
        DeviceBuffer<float> out = from_host(lgtest::random_floats(n)).sync_on(s);
        std::optional<CudaGraph<>> parent;
        std::weak_ptr<const void> x_memory;
        {
          auto dx = std::make_unique<DeviceBuffer<float>>(from_host(x).sync_on(s));
          auto dy = std::make_unique<DeviceBuffer<float>>(from_host(y0).sync_on(s));
          x_memory = dx->cview().owner();
          auto child = record_graph(child_built, k(grid_for(n, 256), 0.5F, dx->cview(), dy->view(), n));
          auto op = child_graph(child) >> copy(out.view(), dy->cview());
          parent.emplace(record_graph(built, op));
          const auto kinds = parent->node_kinds();
          REQUIRE(kinds.size() == 2);
          const auto at = std::find(kinds.begin(), kinds.end(), NodeKind::child_graph);
          REQUIRE(at != kinds.end());
          const std::size_t child_node = static_cast<std::size_t>(at - kinds.begin());
          // The copy waits for the child.
          CHECK(parent->dependencies()[1 - child_node] == std::vector<std::size_t>{child_node});
          // child, dx and dy go out of scope here (op too): the parent must keep what the child's nodes use.
        }
        CHECK_FALSE(x_memory.expired());
        parent->launch();
        parent->launch();
        CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), lgtest::axpy_reference(0.5F, x, y0, 2)) < 1e-6);
        parent.reset();
        CHECK(x_memory.expired());
      }
    }
  }

  TEST_CASE("a parent copies the child as it is when recorded: the child's later updates do not reach it") {
    Stream& s = lgtest::stream();
    const int n = 20'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    const auto k = axpy();
    for (const bool child_built : {true, false}) {
      CAPTURE(child_built);
      DeviceBuffer<float> dx = from_host(x).sync_on(s);
      DeviceBuffer<float> y1 = from_host(y0).sync_on(s);
      DeviceBuffer<float> y2 = from_host(y0).sync_on(s);
      auto child = record_graph(child_built, k(grid_for(n, 256), 0.5F, dx.cview(), y1.view(), n));
      auto parent = CudaGraph<>::build(s.device(), child_graph(child));
      const UpdateResult r = child.update_from(k(grid_for(n, 256), 3.0F, dx.cview(), y2.view(), n));
      REQUIRE_MESSAGE(r.ok(), r.message);
      parent.launch();  // still 0.5 into y1
      CHECK(lgtest::relative_error(lgtest::to_host(s, y1.cview()), lgtest::axpy_reference(0.5F, x, y0, 1)) < 1e-6);
      CHECK(lgtest::to_host(s, y2.cview()) == y0);
      child.launch();  // 3.0 into y2
      CHECK(lgtest::relative_error(lgtest::to_host(s, y2.cview()), lgtest::axpy_reference(3.0F, x, y0, 1)) < 1e-6);
      CHECK(lgtest::relative_error(lgtest::to_host(s, y1.cview()), lgtest::axpy_reference(0.5F, x, y0, 1)) < 1e-6);
    }
  }

  TEST_CASE("a parent keeps the buffers its copy of the child uses after the child was updated to others") {
    Stream& s = lgtest::stream();
    const int n = 20'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    const auto k = axpy();
    for (const bool child_built : {true, false}) {
      CAPTURE(child_built);
      DeviceBuffer<float> out = from_host(lgtest::random_floats(n)).sync_on(s);
      DeviceBuffer<float> x2 = from_host(lgtest::random_floats(n)).sync_on(s);
      DeviceBuffer<float> y2 = from_host(lgtest::random_floats(n)).sync_on(s);
      auto dx = std::make_unique<DeviceBuffer<float>>(from_host(x).sync_on(s));
      auto dy = std::make_unique<DeviceBuffer<float>>(from_host(y0).sync_on(s));
      // dx is used only by the child's kernel: only the parent's copy of the child keeps it.
      const std::weak_ptr<const void> x_memory = dx->cview().owner();
      auto child = record_graph(child_built, k(grid_for(n, 256), -2.0F, dx->cview(), dy->view(), n));
      auto parent = CudaGraph<>::capture(s, child_graph(child) >> copy(out.view(), dy->cview()));
      REQUIRE(child.update_from(k(grid_for(n, 256), -2.0F, x2.cview(), y2.view(), n)).ok());
      child.launch();
      child.launch();  // the child has let go of dx and dy by now
      dx.reset();
      dy.reset();
      CHECK_FALSE(x_memory.expired());
      parent.launch();
      CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), lgtest::axpy_reference(-2.0F, x, y0, 1)) < 1e-6);
    }
  }

  TEST_CASE("one child embedded twice, in sequence or in parallel branches, runs each time") {
    Stream& s = lgtest::stream();
    const int n = 30'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    const auto z0 = lgtest::random_floats(n);
    const auto k = axpy();
    for (const bool built : {true, false}) {
      CAPTURE(built);
      DeviceBuffer<float> dx = from_host(x).sync_on(s);
      DeviceBuffer<float> dy = from_host(y0).sync_on(s);
      DeviceBuffer<float> dz = from_host(z0).sync_on(s);
      auto on_y = CudaGraph<>::build(s.device(), k(grid_for(n, 256), 0.25F, dx.cview(), dy.view(), n));
      auto on_z = CudaGraph<>::capture(s, k(grid_for(n, 256), 4.0F, dx.cview(), dz.view(), n));
      auto parent =
          record_graph(built, (child_graph(on_y) >> child_graph(on_y)) >> all(child_graph(on_z), child_graph(on_y)));
      const auto kinds = parent.node_kinds();
      CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::child_graph) == 4);
      parent.launch();
      CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), lgtest::axpy_reference(0.25F, x, y0, 3)) < 1e-6);
      CHECK(lgtest::relative_error(lgtest::to_host(s, dz.cview()), lgtest::axpy_reference(4.0F, x, z0, 1)) < 1e-6);
      CHECK(on_y.replay_count() == 0);  // embedding is not replaying the child
    }
  }

  TEST_CASE("child_graph run eagerly replays the graph on the stream, in order with the work around it") {
    Stream& s = lgtest::stream();
    const int n = 10'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    const auto start = lgtest::random_floats(n);
    DeviceBuffer<float> dx = from_host(x).sync_on(s);
    DeviceBuffer<float> dy = from_host(y0).sync_on(s);
    DeviceBuffer<float> dstart = from_host(start).sync_on(s);
    DeviceBuffer<float> out = from_host(lgtest::random_floats(n)).sync_on(s);
    const auto k = axpy();
    for (const bool built : {true, false}) {
      CAPTURE(built);
      copy(dy.view(), std::span<const float>(y0)).sync_on(s);
      auto g = record_graph(built, k(grid_for(n, 256), 2.0F, dx.cview(), dy.view(), n));
      child_graph(g).sync_on(s);
      child_graph(g).sync_on(s);
      CHECK(g.replay_count() == 2);
      CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), lgtest::axpy_reference(2.0F, x, y0, 2)) < 1e-6);
      // Before the replay, dy is reset to `start`; after it, dy is copied out: both in stream order.
      (copy(dy.view(), dstart.cview()) >> child_graph(g) >> copy(out.view(), dy.cview())).sync_on(s);
      CHECK(g.replay_count() == 3);
      CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), lgtest::axpy_reference(2.0F, x, start, 1)) < 1e-6);
    }
  }

  TEST_CASE("a host_call that throws inside a child graph is reported by the run that embedded it") {
    Stream& s = lgtest::stream();
    std::atomic<int> calls{0};
    auto child = CudaGraph<>::build(s.device(), allow_in_graph(host_call("child logger", [&] {
                                      calls.fetch_add(1);
                                      throw std::runtime_error("child failed");
                                    })));
    SUBCASE("in a parent graph: the parent's launch throws") {
      for (const bool built : {true, false}) {
        CAPTURE(built);
        calls = 0;
        auto parent = record_graph(built, child_graph(child));
        CHECK_THROWS_AS(parent.launch(), HostCallError);
        CHECK(calls.load() == 1);
        CHECK_NOTHROW(child.launch_on(s));  // the error was the parent's, not the child's
        s.synchronize();
        CHECK_THROWS_AS(child.synchronize(), HostCallError);  // this one is the child's own
      }
    }
    SUBCASE("run eagerly: sync_on throws") {
      CHECK_THROWS_AS(child_graph(child).sync_on(s), HostCallError);
      CHECK(calls.load() == 1);
    }
  }

  TEST_CASE("update(child_graph(g)) on g itself throws UsageError instead of deadlocking") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = from_host(lgtest::random_floats(64)).sync_on(s);
    auto g = CudaGraph<>::build(s.device(), fill(b.view(), 3.0F));
    CHECK_THROWS_AS(g.update(child_graph(g)), UsageError);
    g.launch();
    CHECK(lgtest::to_host(s, b.cview())[0] == 3.0F);
  }
}
