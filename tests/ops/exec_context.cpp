// ExecContext (ops/exec_context.hpp): what ops execute against. In plan mode it writes each piece of work
// down as a NodePlan node with its dependencies and runs nothing; eagerly, fork_join runs branches on their own
// streams, after the work before them and before the work after them; it collects the owners a graph keeps.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "common/gate.hpp"
#include "common/gpu.hpp"

using namespace lazygraph;
using detail::NodePlan;
using detail::PlannedNode;

namespace {

using lgtest::axpy;

std::vector<std::uint32_t> dependencies(const NodePlan& plan, std::size_t i) {
  const auto d = plan.dependencies_of(i);
  std::vector<std::uint32_t> out(d.begin(), d.end());
  std::sort(out.begin(), out.end());
  return out;
}

bool holds(const std::vector<std::shared_ptr<const void>>& owners, const void* owner) {
  return std::any_of(owners.begin(), owners.end(), [&](const auto& o) { return o.get() == owner; });
}

/// The arguments of axpy as a kernel node of `plan` holds them.
struct AxpyArguments {
  float a = 0;
  CUdeviceptr x = 0;
  CUdeviceptr y = 0;
  int n = 0;
};
AxpyArguments axpy_arguments(const NodePlan& plan, const PlannedNode& node) {
  std::vector<void*> p;
  plan.argument_pointers(node, p);
  REQUIRE(p.size() == 5);
  CHECK(p[4] == nullptr);
  AxpyArguments args;
  std::memcpy(&args.a, p[0], sizeof args.a);
  std::memcpy(&args.x, p[1], sizeof args.x);
  std::memcpy(&args.y, p[2], sizeof args.y);
  std::memcpy(&args.n, p[3], sizeof args.n);
  return args;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("in plan mode k1 >> all(k2, copy, fill) >> k3 becomes five nodes in order with their dependencies") {
    Stream& s = lgtest::stream();
    const int n = 10'000;
    const auto x = lgtest::random_floats(n);
    const auto y1 = lgtest::random_floats(n);
    const auto y2 = lgtest::random_floats(n);
    const auto c0 = lgtest::random_floats(n);
    const auto f0 = lgtest::random_floats(n);
    DeviceBuffer<float> dx = lgtest::to_device(s, x);
    DeviceBuffer<float> dy1 = lgtest::to_device(s, y1);
    DeviceBuffer<float> dy2 = lgtest::to_device(s, y2);
    DeviceBuffer<float> dc = lgtest::to_device(s, c0);
    DeviceBuffer<float> df = lgtest::to_device(s, f0);
    const auto a = lgtest::random_floats(4);
    const float v = a[3] + 2.0F;
    const auto k = axpy();
    const LaunchConfig cfg1 = grid_for(n, 256);
    const LaunchConfig cfg3 = grid_for(n, 128);
    const auto op = k(cfg1, a[0], dx.cview(), dy1.view(), n) >>
                    all(k(cfg1, a[1], dx.cview(), dy2.view(), n), copy(dc.view(), dy1.cview()), fill(df.view(), v)) >>
                    k(cfg3, a[2], dx.cview(), dy1.view(), n);

    NodePlan plan;
    std::vector<std::shared_ptr<const void>> owners;
    {
      ExecContext ctx(s, plan);
      CHECK(ctx.planning());
      CHECK(ctx.recording());
      CHECK(&ctx.stream() == &s);
      op.execute(ctx);
      owners = ctx.take_owners();
      CHECK(ctx.take_owners().empty());  // taken once
    }
    CHECK(plan.context == lgtest::device().context());

    // The nodes, in the order the ops submitted them.
    REQUIRE(plan.nodes.size() == 5);
    CHECK(plan.nodes[0].type == CU_GRAPH_NODE_TYPE_KERNEL);
    CHECK(plan.nodes[1].type == CU_GRAPH_NODE_TYPE_KERNEL);
    CHECK(plan.nodes[2].type == CU_GRAPH_NODE_TYPE_MEMCPY);
    CHECK(plan.nodes[3].type == CU_GRAPH_NODE_TYPE_MEMSET);
    CHECK(plan.nodes[4].type == CU_GRAPH_NODE_TYPE_KERNEL);

    // k1 first; k2, the copy and the fill each after k1 only (parallel branches); k3 after all three.
    CHECK(dependencies(plan, 0).empty());
    CHECK(dependencies(plan, 1) == std::vector<std::uint32_t>{0});
    CHECK(dependencies(plan, 2) == std::vector<std::uint32_t>{0});
    CHECK(dependencies(plan, 3) == std::vector<std::uint32_t>{0});
    CHECK(dependencies(plan, 4) == std::vector<std::uint32_t>{1, 2, 3});

    // The kernel nodes: the function, the launch shape, and the argument values passed.
    for (const std::size_t i : {0U, 1U, 4U}) {
      CAPTURE(i);
      const PlannedNode& node = plan.nodes[i];
      CHECK(node.function == k.info()->function);
      CHECK(node.name == "axpy");
      CHECK(node.argument_count == 4);
      const LaunchConfig& cfg = i == 4 ? cfg3 : cfg1;
      CHECK(node.shape.grid[0] == cfg.grid.x);
      CHECK(node.shape.block[0] == cfg.block.x);
    }
    const AxpyArguments k1 = axpy_arguments(plan, plan.nodes[0]);
    CHECK(k1.a == a[0]);
    CHECK(k1.x == dx.view().address());
    CHECK(k1.y == dy1.view().address());
    CHECK(k1.n == n);
    const AxpyArguments k2 = axpy_arguments(plan, plan.nodes[1]);
    CHECK(k2.a == a[1]);
    CHECK(k2.x == dx.view().address());
    CHECK(k2.y == dy2.view().address());
    CHECK(k2.n == n);
    const AxpyArguments k3 = axpy_arguments(plan, plan.nodes[4]);
    CHECK(k3.a == a[2]);
    CHECK(k3.y == dy1.view().address());

    // The copy and the fill.
    CHECK(plan.nodes[2].dst == dc.view().address());
    CHECK(plan.nodes[2].src == dy1.view().address());
    CHECK(plan.nodes[2].bytes == n * sizeof(float));
    CHECK(plan.nodes[3].dst == df.view().address());
    CHECK(plan.nodes[3].bytes == static_cast<std::size_t>(n));  // elements
    CHECK(plan.nodes[3].element_size == sizeof(float));
    CHECK(plan.nodes[3].pattern == detail::bit_pattern(v));

    // The owners: every buffer the ops touch, and the kernel (which keeps its module loaded).
    CHECK_FALSE(owners.empty());
    for (const auto* b : {&dx, &dy1, &dy2, &dc, &df}) CHECK(holds(owners, b->cview().owner().get()));
    CHECK(holds(owners, k.info().get()));

    // Nothing ran.
    CHECK(s.query());
    CHECK(lgtest::to_host(s, dy1.cview()) == y1);
    CHECK(lgtest::to_host(s, dy2.cview()) == y2);
    CHECK(lgtest::to_host(s, dc.cview()) == c0);
    CHECK(lgtest::to_host(s, df.cview()) == f0);
  }

  TEST_CASE("in plan mode a branch without nodes leaves the fork point in the join, and join() is an empty node") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = zeros<float>(1000).sync_on(s);
    DeviceBuffer<float> c = zeros<float>(1000).sync_on(s);
    const auto op = fill(b.view(), 1.0F) >> all(value(5), fill(c.view(), 2.0F)) >> join() >> copy(c.view(), b.cview());
    NodePlan plan;
    {
      ExecContext ctx(s, plan);
      op.execute(ctx);
    }
    REQUIRE(plan.nodes.size() == 4);
    CHECK(plan.nodes[0].type == CU_GRAPH_NODE_TYPE_MEMSET);
    CHECK(plan.nodes[1].type == CU_GRAPH_NODE_TYPE_MEMSET);
    CHECK(plan.nodes[2].type == CU_GRAPH_NODE_TYPE_EMPTY);
    CHECK(plan.nodes[3].type == CU_GRAPH_NODE_TYPE_MEMCPY);
    CHECK(dependencies(plan, 1) == std::vector<std::uint32_t>{0});
    CHECK(dependencies(plan, 2) == std::vector<std::uint32_t>{0, 1});  // value's branch ends where it began
    CHECK(dependencies(plan, 3) == std::vector<std::uint32_t>{2});
    CHECK(plan.argument_bytes.empty());
    CHECK(lgtest::to_host(s, b.cview())[0] == 0.0F);
  }

  TEST_CASE("eagerly, fork_join runs each branch on its own stream, after the work before and before the work after") {
    Stream& s = lgtest::stream();
    const int n = 8192;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    const auto r = lgtest::random_floats(3);
    const float v = r[0] + 2.0F;  // what the work before the fork writes
    const float w = r[1] + 4.0F;  // what the gated branch writes
    const DeviceBuffer<float> dx = lgtest::to_device(s, x);
    DeviceBuffer<float> src = lgtest::to_device(s, lgtest::random_floats(n));
    DeviceBuffer<float> y = lgtest::to_device(s, y0);
    DeviceBuffer<float> copied = lgtest::to_device(s, lgtest::random_floats(n));
    DeviceBuffer<float> gated = lgtest::to_device(s, lgtest::random_floats(n));
    DeviceBuffer<float> after = lgtest::to_device(s, lgtest::random_floats(n));
    const auto k = axpy();
    std::vector<const Stream*> seen(3, nullptr);
    {
      lgtest::Gate before_fork;
      lgtest::Gate in_branch;
      ExecContext ctx(s, false);
      CHECK_FALSE(ctx.recording());
      CHECK_FALSE(ctx.planning());
      before_fork.close_on(s);
      fill(src.view(), v).execute(ctx);
      ctx.fork_join(
          [&] {
            seen[0] = &ctx.stream();
            k(grid_for(n, 256), r[2], dx.cview(), y.view(), n).execute(ctx);
          },
          [&] {
            seen[1] = &ctx.stream();
            copy(copied.view(), src.cview()).execute(ctx);  // must see the fill before the fork
          },
          [&] {
            seen[2] = &ctx.stream();
            in_branch.close_on(ctx.stream());
            fill(gated.view(), w).execute(ctx);
          });
      CHECK(&ctx.stream() == &s);
      copy(after.view(), gated.cview()).execute(ctx);  // must wait for the gated branch

      before_fork.open();
      // Everything on s but the join has been let through; the join waits for the gated branch.
      CHECK_FALSE(lgtest::becomes_true_within([&] { return s.query(); }, std::chrono::milliseconds(200)));
      in_branch.open();
      s.synchronize();
    }
    CHECK(seen[0] == &s);
    REQUIRE(seen[1] != nullptr);
    REQUIRE(seen[2] != nullptr);
    CHECK(seen[1] != &s);
    CHECK(seen[2] != &s);
    CHECK(seen[1] != seen[2]);
    CHECK(lgtest::relative_error(lgtest::to_host(s, y.cview()), lgtest::axpy_reference(r[2], x, y0, 1)) < 1e-6);
    const auto got_copied = lgtest::to_host(s, copied.cview());
    CHECK(std::all_of(got_copied.begin(), got_copied.end(), [&](float e) { return e == v; }));
    const auto got_after = lgtest::to_host(s, after.cview());
    CHECK(std::all_of(got_after.begin(), got_after.end(), [&](float e) { return e == w; }));
  }

  TEST_CASE("keep_alive ignores null owners and repeats of a recent one; take_owners hands them over") {
    Stream& s = lgtest::stream();
    ExecContext ctx(s, false);
    const auto a = std::make_shared<const int>(1);
    const auto b = std::make_shared<const int>(2);
    ctx.keep_alive(nullptr);
    ctx.keep_alive(a);
    ctx.keep_alive(b);
    ctx.keep_alive(a);
    const auto owners = ctx.take_owners();
    REQUIRE(owners.size() == 2);
    CHECK(owners[0] == a);
    CHECK(owners[1] == b);
    CHECK(a.use_count() == 2);  // here and in `owners`
    const std::shared_ptr<HostCallErrors> errors = ctx.host_errors();
    REQUIRE(errors != nullptr);
    CHECK(errors == ctx.host_errors());  // made once, then the same
  }
}
