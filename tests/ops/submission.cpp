// Submission (detail/ops/submission.hpp): each mode carries out the verbs its own way. Plan submission writes a 2-D
// copy as one memcpy node with its rows and pitches, and nested forks join every branch; eager submission refuses
// what only a graph has and remembers a submitted host call.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "common/gpu.hpp"
#include "lazygraph/detail/ops/node_plan.hpp"
#include "lazygraph/detail/ops/submission.hpp"

using namespace lazygraph;
using detail::NodePlan;

namespace {

std::vector<std::uint32_t> sorted_dependencies(const NodePlan& plan, std::size_t i) {
  const auto d = plan.dependencies_of(i);
  std::vector<std::uint32_t> out(d.begin(), d.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("plan submission writes a 2-D copy as one memcpy node with its rows and pitches") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> src = from_host(lgtest::random_floats(40 * 7)).sync_on(s);
    DeviceBuffer<float> dst = from_host(lgtest::random_floats(40 * 5)).sync_on(s);
    NodePlan plan;
    {
      ExecContext ctx(s, plan);
      copy_2d(dst.view(), 5, src.cview().subspan(2, 278), 7, 3, 40).execute(ctx);
      copy_2d(dst.view(), 5, src.cview(), 7, 4, 1).execute(ctx);  // one row: pitches are the row's length
    }
    REQUIRE(plan.nodes.size() == 2);
    const auto& rows = plan.nodes[0];
    CHECK(rows.type == CU_GRAPH_NODE_TYPE_MEMCPY);
    CHECK(rows.dst == dst.view().address());
    CHECK(rows.src == src.cview().subspan(2, 278).address());
    CHECK(rows.bytes == 3 * sizeof(float));
    CHECK(rows.rows == 40);
    CHECK(rows.dst_pitch == 5 * sizeof(float));
    CHECK(rows.src_pitch == 7 * sizeof(float));
    CHECK(plan.nodes[1].rows == 1);
    CHECK(plan.nodes[1].dst_pitch == 4 * sizeof(float));
    CHECK(plan.nodes[1].src_pitch == 4 * sizeof(float));
    CHECK(sorted_dependencies(plan, 1) == std::vector<std::uint32_t>{0});
  }

  TEST_CASE("plan submission joins nested forks: all(all(a, b), c) >> d makes d wait for a, b and c") {
    Stream& s = lgtest::stream();
    std::vector<DeviceBuffer<float>> b;
    for (int i = 0; i < 4; ++i) b.push_back(from_host(lgtest::random_floats(64)).sync_on(s));
    const auto op =
        all(all(fill(b[0].view(), 1.0F), fill(b[1].view(), 2.0F)), fill(b[2].view(), 3.0F)) >> fill(b[3].view(), 4.0F);
    NodePlan plan;
    {
      ExecContext ctx(s, plan);
      op.execute(ctx);
    }
    REQUIRE(plan.nodes.size() == 4);
    CHECK(sorted_dependencies(plan, 0).empty());
    CHECK(sorted_dependencies(plan, 1).empty());
    CHECK(sorted_dependencies(plan, 2).empty());
    CHECK(sorted_dependencies(plan, 3) == std::vector<std::uint32_t>{0, 1, 2});
  }

  TEST_CASE("eager submission refuses child graphs and conditional nodes, and remembers a host call") {
    Stream& s = lgtest::stream();
    const auto eager = detail::eager_submission(s);
    CHECK_FALSE(eager->recording());
    CHECK(eager->plan() == nullptr);
    CHECK_THROWS_WITH_AS(eager->child_graph(nullptr), doctest::Contains("launch it instead"), UsageError);
    CHECK_THROWS_AS(eager->conditional(0, CU_GRAPH_COND_TYPE_IF, 1, {}), UsageError);
    CHECK_FALSE(eager->submitted_host_calls());
    static int calls = 0;
    eager->host_function([](void* /*data*/) { ++calls; }, nullptr, "count");
    CHECK(eager->submitted_host_calls());
    s.synchronize();
    CHECK(calls == 1);
  }
}
