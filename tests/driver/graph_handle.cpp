// Graph and GraphExec (detail/driver/graph_handle.hpp): move-only owners of a CUgraph and a CUgraphExec, null
// after a move, each destroyed exactly once (live_handles counts them).
#include <doctest/doctest.h>

#include <lazygraph/detail/driver/driver_api.hpp>
#include <lazygraph/detail/driver/graph_handle.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;
namespace drv = lazygraph::detail::driver;

namespace {

/// A graph of one memset node that sets every element of `dst` to `value`.
drv::Graph memset_graph(const DeviceSpan<float>& dst, float value) {
  drv::Graph graph(drv::graph_create());
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEMSET;
  p.memset.dst = dst.address();
  std::memcpy(&p.memset.value, &value, sizeof value);
  p.memset.elementSize = sizeof(float);
  p.memset.width = dst.size();
  p.memset.height = 1;
  p.memset.ctx = lgtest::device().context();
  (void)drv::graph_add_node(graph.native_handle(), nullptr, nullptr, 0, &p, "test memset");
  return graph;
}

float random_value() {
  static std::mt19937 rng{std::random_device{}()};
  return std::uniform_real_distribution<float>(1.0F, 2.0F)(rng);
}

bool all_equal(const std::vector<float>& v, float x) {
  return std::all_of(v.begin(), v.end(), [&](float e) { return e == x; });
}

}  // namespace

static_assert(!std::is_copy_constructible_v<drv::Graph> && !std::is_copy_assignable_v<drv::Graph>);
static_assert(std::is_nothrow_move_constructible_v<drv::Graph> && std::is_nothrow_move_assignable_v<drv::Graph>);
static_assert(!std::is_copy_constructible_v<drv::GraphExec> && !std::is_copy_assignable_v<drv::GraphExec>);
static_assert(std::is_nothrow_move_constructible_v<drv::GraphExec> &&
              std::is_nothrow_move_assignable_v<drv::GraphExec>);

TEST_CASE("a default Graph and GraphExec are null") {
  const drv::Graph g;
  CHECK_FALSE(static_cast<bool>(g));
  CHECK(g.native_handle() == nullptr);
  const drv::GraphExec e;
  CHECK_FALSE(static_cast<bool>(e));
  CHECK(e.native_handle() == nullptr);
  CHECK(e.context() == nullptr);
}

TEST_SUITE("gpu") {
  TEST_CASE("a Graph is null after a move, and each graph is destroyed once, by its last owner") {
    (void)lgtest::device();
    const LiveHandles before = live_handles();
    {
      drv::Graph a(drv::graph_create());
      const CUgraph raw = a.native_handle();
      REQUIRE(raw != nullptr);
      CHECK(live_handles().graphs == before.graphs + 1);

      drv::Graph b = std::move(a);
      CHECK_FALSE(static_cast<bool>(a));    // NOLINT(bugprone-use-after-move): testing the moved-from state
      CHECK(a.native_handle() == nullptr);  // NOLINT(bugprone-use-after-move)
      CHECK(b.native_handle() == raw);
      CHECK(live_handles().graphs == before.graphs + 1);

      drv::Graph c(drv::graph_create());
      CHECK(live_handles().graphs == before.graphs + 2);
      c = std::move(b);  // c's own graph is destroyed, b's taken
      CHECK(c.native_handle() == raw);
      CHECK_FALSE(static_cast<bool>(b));  // NOLINT(bugprone-use-after-move)
      CHECK(live_handles().graphs == before.graphs + 1);

      drv::Graph& same = c;
      c = std::move(same);  // moving into itself keeps the graph
      CHECK(c.native_handle() == raw);
      CHECK(live_handles().graphs == before.graphs + 1);

      a = drv::Graph(drv::graph_create());  // a moved-from Graph takes a new one
      CHECK(static_cast<bool>(a));
      CHECK(live_handles().graphs == before.graphs + 2);
      a.reset();
      CHECK_FALSE(static_cast<bool>(a));
      CHECK(live_handles().graphs == before.graphs + 1);

      const CUgraph released = c.release();  // the caller's now: c no longer destroys it
      CHECK(released == raw);
      CHECK_FALSE(static_cast<bool>(c));
      CHECK(live_handles().graphs == before.graphs + 1);
      drv::Graph again(released);
      CHECK(again.native_handle() == raw);
    }
    CHECK(live_handles() == before);
  }

  TEST_CASE("a GraphExec is null after a move; the moved-to one replays the graph, which is destroyed once") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = from_host(lgtest::random_floats(4096)).sync_on(s);
    const float x = random_value();
    const float y = random_value() + 2.0F;
    const LiveHandles before = live_handles();
    {
      drv::Graph graph = memset_graph(b.view(), x);
      drv::GraphExec a = drv::GraphExec::instantiate(graph, lgtest::device().context(), "test graph");
      REQUIRE(static_cast<bool>(a));
      const CUgraphExec raw = a.native_handle();
      CHECK(a.context() == lgtest::device().context());
      CHECK(live_handles().graph_execs == before.graph_execs + 1);
      graph.reset();  // an executable graph does not need the graph it came from

      drv::GraphExec moved = std::move(a);
      CHECK_FALSE(static_cast<bool>(a));    // NOLINT(bugprone-use-after-move): testing the moved-from state
      CHECK(a.native_handle() == nullptr);  // NOLINT(bugprone-use-after-move)
      CHECK(a.context() == nullptr);        // NOLINT(bugprone-use-after-move)
      CHECK(moved.native_handle() == raw);
      CHECK(live_handles().graph_execs == before.graph_execs + 1);
      drv::graph_launch(moved.context(), moved.native_handle(), s.get(), "test graph");
      CHECK(all_equal(lgtest::to_host(s, b.cview()), x));

      drv::Graph other_graph = memset_graph(b.view(), y);
      drv::GraphExec other = drv::GraphExec::instantiate(other_graph, lgtest::device().context(), "other graph");
      CHECK(live_handles().graph_execs == before.graph_execs + 2);
      moved = std::move(other);               // moved's executable graph is destroyed, other's taken
      CHECK_FALSE(static_cast<bool>(other));  // NOLINT(bugprone-use-after-move)
      CHECK(live_handles().graph_execs == before.graph_execs + 1);
      drv::graph_launch(moved.context(), moved.native_handle(), s.get(), "other graph");
      CHECK(all_equal(lgtest::to_host(s, b.cview()), y));

      moved.reset();
      CHECK_FALSE(static_cast<bool>(moved));
      CHECK(live_handles().graph_execs == before.graph_execs);
    }
    CHECK(live_handles() == before);
  }

  TEST_CASE("a GraphExec that cannot be instantiated throws CudaError naming the graph, and leaks nothing") {
    (void)lgtest::device();
    const drv::Graph graph(drv::graph_create());
    const LiveHandles before = live_handles();
    {
      const drv::InjectedFault fault("cuGraphInstantiateWithFlags", CUDA_ERROR_OUT_OF_MEMORY);
      CHECK_THROWS_WITH_AS((void)drv::GraphExec::instantiate(graph, lgtest::device().context(), "the named graph"),
                           doctest::Contains("the named graph"), CudaError);
    }
    CHECK(live_handles() == before);
  }
}
