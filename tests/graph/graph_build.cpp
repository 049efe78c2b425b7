// CudaGraph::build (nodes added directly) against capture, and update_from on built and captured graphs.
#include <doctest/doctest.h>

#include <lazygraph/detail/driver/driver_api.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

using lgtest::axpy;

std::string describe(const std::vector<NodeKind>& kinds, const std::vector<std::vector<std::size_t>>& deps) {
  std::ostringstream out;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    out << i << ":" << to_string(kinds[i]) << "<-{";
    for (const std::size_t d : deps[i]) out << d << ",";
    out << "} ";
  }
  return out.str();
}

/// Builds and captures `op`, and checks that both graphs have the same nodes, in the same order, with the same
/// dependencies and edge kinds.
template <class Op>
void check_same_structure(const Op& op) {
  Stream& s = lgtest::stream();
  auto captured = CudaGraph<>::capture(s, op);
  auto built = CudaGraph<>::build(s.device(), op);
  CHECK(built.built());
  CHECK_FALSE(captured.built());
  const std::string c = describe(captured.node_kinds(), captured.dependencies());
  const std::string b = describe(built.node_kinds(), built.dependencies());
  INFO("captured: " << c);
  INFO("built:    " << b);
  CHECK(c == b);
  CHECK(captured.edge_counts().full == built.edge_counts().full);
  CHECK(captured.edge_counts().programmatic == built.edge_counts().programmatic);
}

struct Buffers {
  int n;
  std::vector<float> x;
  std::vector<std::vector<float>> y0;
  DeviceBuffer<float> dx;
  std::vector<DeviceBuffer<float>> ys;

  Buffers(int size, int count) : n(size), x(lgtest::random_floats(size)), dx(from_host(x).sync_on(lgtest::stream())) {
    for (int i = 0; i < count; ++i) {
      y0.push_back(lgtest::random_floats(size));
      ys.push_back(from_host(y0.back()).sync_on(lgtest::stream()));
    }
  }
  void reset() {
    for (std::size_t i = 0; i < ys.size(); ++i) copy(ys[i].view(), y0[i]).sync_on(lgtest::stream());
  }
  [[nodiscard]] double error(std::size_t i, float a, int times) const {
    return lgtest::relative_error(lgtest::to_host(lgtest::stream(), ys[i].cview()),
                                  lgtest::axpy_reference(a, x, y0[i], times));
  }
};

/// A GraphNode of a user's own that submits to the stream directly: it can be captured, not built.
struct CaptureOnlyFill : OpBase<CaptureOnlyFill> {
  using Output = void;
  static constexpr bool is_graph_node = true;
  DeviceSpan<float> dst;
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(dst.owner());
    const float nine = 9.0F;
    unsigned pattern = 0;
    std::memcpy(&pattern, &nine, sizeof pattern);
    detail::driver::fill(ctx.stream().device().context(), dst.address(), pattern, 4, dst.size(), ctx.stream().get());
  }
};
static_assert(GraphNode<CaptureOnlyFill> && !BuildableNode<CaptureOnlyFill>);

/// A plan of one conditional node (IF, steered by condition `handle`) whose body is a chain of fills, one per
/// address in `fills`.
detail::NodePlan if_plan(CUgraphConditionalHandle handle, const std::vector<CUdeviceptr>& fills) {
  detail::NodePlan plan;
  plan.conditions.push_back({handle, 1});
  detail::PlannedNode node;
  node.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  node.condition = handle;
  node.condition_type = CU_GRAPH_COND_TYPE_IF;
  node.first_body = 0;
  node.body_count = 1;
  plan.bodies.resize(1);
  std::vector<std::uint32_t> deps;
  for (const CUdeviceptr dst : fills) {
    detail::PlannedNode fill;
    fill.type = CU_GRAPH_NODE_TYPE_MEMSET;
    fill.dst = dst;
    fill.element_size = 4;
    fill.bytes = 1;
    deps.assign(1, plan.bodies[0].add(fill, deps));
  }
  plan.add(node, {});
  return plan;
}

}  // namespace

TEST_CASE("plans with conditional nodes compare body by body, and name the body that differs") {
  const detail::NodePlan base = if_plan(7, {0x1000});
  CHECK_FALSE(detail::plan_mismatch(base, if_plan(7, {0x2000})).has_value());  // another address: in place
  CHECK(detail::conditions_made_for(base));
  CHECK(base.total_nodes() == 2);

  const auto longer = detail::plan_mismatch(base, if_plan(7, {0x1000, 0x2000}));
  REQUIRE(longer.has_value());
  CHECK(longer->status == UpdateStatus::topology_changed);
  CHECK(longer->node == std::optional<std::size_t>(0));  // the conditional node that holds the body
  CHECK_MESSAGE(longer->message.find("body 0: the op makes 2 nodes; the graph has 1") != std::string::npos,
                longer->message);

  detail::NodePlan other_handle = if_plan(7, {0x1000});
  other_handle.nodes[0].condition = 8;
  const auto steered = detail::plan_mismatch(base, other_handle);
  REQUIRE(steered.has_value());
  CHECK(steered->status == UpdateStatus::parameters_changed);
  CHECK(steered->message.find("another condition") != std::string::npos);
  CHECK_FALSE(detail::conditions_made_for(other_handle));  // node steered by 8; the plan made 7

  detail::NodePlan two = if_plan(7, {0x1000});
  two.conditions.push_back({9, 0});
  const auto more = detail::plan_mismatch(base, two);
  REQUIRE(more.has_value());
  CHECK(more->message.find("the op makes 2 conditions; the graph has 1") != std::string::npos);

  detail::NodePlan other_default = if_plan(7, {0x1000});
  other_default.conditions[0].default_value = 0;
  const auto starts = detail::plan_mismatch(base, other_default);
  REQUIRE(starts.has_value());
  CHECK(starts->message.find("condition 0 starts at 0; the graph's starts at 1") != std::string::npos);
}

TEST_CASE("plans with scratch memory compare the number and size of their scratch allocations") {
  detail::NodePlan base = if_plan(7, {0x1000});
  base.scratch.push_back({nullptr, 0x9000, 256});
  detail::NodePlan same = if_plan(7, {0x2000});
  same.scratch = base.scratch;
  CHECK_FALSE(detail::plan_mismatch(base, same).has_value());

  detail::NodePlan none = if_plan(7, {0x1000});
  const auto fewer = detail::plan_mismatch(base, none);
  REQUIRE(fewer.has_value());
  CHECK(fewer->status == UpdateStatus::topology_changed);
  CHECK_MESSAGE(fewer->message.find("scratch memory 0 time(s); the graph has 1") != std::string::npos, fewer->message);

  detail::NodePlan larger = same;
  larger.scratch[0].bytes = 512;
  const auto bigger = detail::plan_mismatch(base, larger);
  REQUIRE(bigger.has_value());
  CHECK(bigger->status == UpdateStatus::parameters_changed);
  CHECK(bigger->message.find("scratch 0 has 512 bytes; the graph's has 256") != std::string::npos);
}

TEST_SUITE("gpu") {
  TEST_CASE("build and capture record the same nodes and dependencies for the same op") {
    Buffers b(4096, 4);
    const auto k = axpy();
    const auto cfg = grid_for(b.n, 256);
    const auto step = [&](int i, float a) {
      return k(cfg, a, b.dx.cview(), b.ys[static_cast<std::size_t>(i)].view(), b.n);
    };
    SUBCASE("a chain of kernels, a copy and a fill") {
      check_same_structure(step(0, 1.0F) >> step(0, 2.0F) >> copy(b.ys[1].view(), b.ys[0].cview()) >>
                           fill(b.ys[2].view(), 3.0F));
    }
    SUBCASE("all(...) branches joined by a later kernel") {
      check_same_structure(step(0, 1.0F) >>
                           all(step(1, 1.0F), step(2, 2.0F) >> step(2, 3.0F), fill(b.ys[3].view(), 1.0F)) >>
                           step(0, 5.0F));
    }
    SUBCASE("nested all") {
      check_same_structure(all(step(0, 1.0F) >> all(step(1, 1.0F), step(2, 1.0F)), step(3, 1.0F)) >> step(0, 2.0F));
    }
    SUBCASE("a join between two all(...)s") {
      check_same_structure(all(step(0, 1.0F), step(1, 1.0F), step(2, 1.0F)) >> join() >>
                           all(step(0, 2.0F), step(1, 2.0F), step(3, 2.0F)));
    }
    SUBCASE("a branch that submits nothing") {
      check_same_structure(step(0, 1.0F) >> all(step(1, 1.0F), value(7)) >> step(2, 1.0F));
    }
    SUBCASE("a chain of a run-time length") {
      std::vector<decltype(step(0, 1.0F))> steps;
      steps.reserve(10);
      for (int i = 0; i < 10; ++i) steps.push_back(step(i % 4, 0.5F));
      check_same_structure(chain(steps));
    }
    SUBCASE("kernels launched early (programmatic edges)") {
      check_same_structure(step(0, 1.0F) >> k(early(cfg), 2.0F, b.dx.cview(), b.ys[0].view(), b.n) >>
                           k(early(cfg), 3.0F, b.dx.cview(), b.ys[1].view(), b.n));
    }
  }

  TEST_CASE("join() adds one empty node between two all(...)s, captured or built") {
    Buffers b(1000, 4);
    const auto k = axpy();
    const auto cfg = grid_for(b.n, 256);
    auto op = all(k(cfg, 1.0F, b.dx.cview(), b.ys[0].view(), b.n), k(cfg, 1.0F, b.dx.cview(), b.ys[1].view(), b.n)) >>
              join() >>
              all(k(cfg, 1.0F, b.dx.cview(), b.ys[2].view(), b.n), k(cfg, 1.0F, b.dx.cview(), b.ys[3].view(), b.n));
    for (const bool built : {true, false}) {
      CAPTURE(built);
      auto graph = built ? CudaGraph<>::build(lgtest::device(), op) : CudaGraph<>::capture(lgtest::stream(), op);
      const auto kinds = graph.node_kinds();
      CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::empty) == 1);
      CHECK(graph.edge_counts().full == 4);  // two into the join, two out of it
    }
    join().sync_on(lgtest::stream());  // eagerly: nothing to do, and no error
  }

  TEST_CASE("a built graph replays the op's work, with its output kept") {
    Buffers b(100'000, 3);
    const auto k = axpy();
    const auto cfg = grid_for(b.n, 256);
    auto op = all(k(cfg, 0.5F, b.dx.cview(), b.ys[0].view(), b.n), k(cfg, 2.0F, b.dx.cview(), b.ys[1].view(), b.n)) >>
              k(cfg, 1.5F, b.dx.cview(), b.ys[2].view(), b.n) >> value(42);
    auto graph = CudaGraph<>::build(lgtest::device(), op);
    CHECK(graph.take_output() == 42);
    CHECK(lgtest::to_host(lgtest::stream(), b.ys[0].cview()) == b.y0[0]);  // building ran nothing
    for (int i = 0; i < 3; ++i) graph.launch();
    CHECK(b.error(0, 0.5F, 3) < 1e-6);
    CHECK(b.error(1, 2.0F, 3) < 1e-6);
    CHECK(b.error(2, 1.5F, 3) < 1e-6);
    CHECK(graph.replay_count() == 3);
  }

  TEST_CASE("a built graph from a scope callback records what the callback records") {
    Buffers b(10'000, 2);
    const auto k = axpy();
    const auto cfg = grid_for(b.n, 256);
    auto graph = CudaGraph<>::build(lgtest::device(), [&](Scope& s) {
      s.record(k(cfg, 1.0F, b.dx.cview(), b.ys[0].view(), b.n));
      s.record(k(cfg, 2.0F, b.dx.cview(), b.ys[1].view(), b.n));
      return 3;
    });
    CHECK(graph.take_output() == 3);
    CHECK(graph.node_count() == 2);
    graph.launch();
    CHECK(b.error(0, 1.0F, 1) < 1e-6);
    CHECK(b.error(1, 2.0F, 1) < 1e-6);
  }

  TEST_CASE("update_from points a graph at other buffers and scalars, built or captured") {
    for (const bool built : {true, false}) {
      CAPTURE(built);
      Buffers b(50'000, 4);
      const auto k = axpy();
      const auto cfg = grid_for(b.n, 256);
      const auto op = [&](std::size_t first, float a) {
        return k(cfg, a, b.dx.cview(), b.ys[first].view(), b.n) >> k(cfg, a, b.dx.cview(), b.ys[first + 1].view(), b.n);
      };
      auto graph = built ? CudaGraph<>::build(lgtest::device(), op(0, 1.0F))
                         : CudaGraph<>::capture(lgtest::stream(), op(0, 1.0F));
      graph.launch();
      const UpdateResult r = graph.update_from(op(2, 3.0F));
      INFO(r.message);
      CHECK(r.status == UpdateStatus::applied);
      CHECK(r.ok());
      graph.launch();
      graph.launch();
      CHECK(b.error(0, 1.0F, 1) < 1e-6);  // untouched after the update
      CHECK(b.error(1, 1.0F, 1) < 1e-6);
      CHECK(b.error(2, 3.0F, 2) < 1e-6);
      CHECK(b.error(3, 3.0F, 2) < 1e-6);
    }
  }

  TEST_CASE("update_from with an op of another shape reports why and where, and leaves the graph working") {
    for (const bool built : {true, false}) {
      CAPTURE(built);
      Buffers b(20'000, 2);
      const auto k = axpy();
      const auto cfg = grid_for(b.n, 256);
      const auto one = k(cfg, 1.0F, b.dx.cview(), b.ys[0].view(), b.n);
      auto graph = built ? CudaGraph<>::build(lgtest::device(), one) : CudaGraph<>::capture(lgtest::stream(), one);

      const UpdateResult more = graph.update_from(one >> k(cfg, 1.0F, b.dx.cview(), b.ys[1].view(), b.n));
      CHECK(more.status == UpdateStatus::topology_changed);
      CHECK_FALSE(more.ok());
      CHECK_FALSE(more.message.empty());

      const UpdateResult other_kind = graph.update_from(fill(b.ys[1].view(), 2.0F));
      CHECK(other_kind.status == UpdateStatus::node_type_changed);
      REQUIRE(other_kind.node.has_value());
      CHECK(*other_kind.node == 0);

      // Still the original graph: one axpy into ys[0] per replay, nothing into ys[1].
      graph.launch();
      graph.launch();
      CHECK(b.error(0, 1.0F, 2) < 1e-6);
      CHECK(lgtest::to_host(lgtest::stream(), b.ys[1].cview()) == b.y0[1]);
    }
  }

  TEST_CASE("update_from may change a node's kernel; another topology re-instantiates only on request") {
    Buffers b(20'000, 1);
    const auto k = axpy();
    auto fill_kernel = lgtest::kernels().get<void(float*, float, int)>("fill_f32");
    const auto cfg = grid_for(b.n, 256);
    for (const bool built : {true, false}) {
      CAPTURE(built);
      b.reset();
      const auto first = k(cfg, 1.0F, b.dx.cview(), b.ys[0].view(), b.n);
      auto graph = built ? CudaGraph<>::build(lgtest::device(), first) : CudaGraph<>::capture(lgtest::stream(), first);
      const UpdateResult swapped = graph.update_from(fill_kernel(cfg, b.ys[0].view(), 4.0F, b.n));
      INFO(swapped.message);
      CHECK(swapped.status == UpdateStatus::applied);
      graph.launch();
      const auto fours = lgtest::to_host(lgtest::stream(), b.ys[0].cview());
      CHECK(std::all_of(fours.begin(), fours.end(), [](float v) { return v == 4.0F; }));

      const auto replacement = fill(b.ys[0].view(), 1.0F) >> k(cfg, 1.0F, b.dx.cview(), b.ys[0].view(), b.n);
      const UpdateResult refused = graph.update_from(replacement);
      CHECK(refused.status == UpdateStatus::topology_changed);
      UpdateOptions options;
      options.reinstantiate_on_mismatch = true;
      const UpdateResult redone = graph.update_from(replacement, options);
      CHECK(redone.status == UpdateStatus::reinstantiated);
      CHECK(redone.ok());
      CHECK(graph.node_count() == 2);
      graph.launch();
      std::vector<double> ref(b.x.size());
      for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = 1.0 + double(b.x[i]);
      CHECK(lgtest::relative_error(lgtest::to_host(lgtest::stream(), b.ys[0].cview()), ref) < 1e-6);
    }
  }

  TEST_CASE("the buffers of the op a graph was updated from replace the old ones, which are released") {
    for (const bool built : {true, false}) {
      CAPTURE(built);
      Stream& s = lgtest::stream();
      const int n = 1024;
      const auto k = axpy();
      auto x = std::make_unique<DeviceBuffer<float>>(from_host(lgtest::random_floats(n)).sync_on(s));
      auto y = std::make_unique<DeviceBuffer<float>>(from_host(lgtest::random_floats(n)).sync_on(s));
      const std::weak_ptr<const void> old_y = y->cview().owner();
      auto graph = built ? CudaGraph<>::build(s.device(), k(grid_for(n, 256), 1.0F, x->cview(), y->view(), n))
                         : CudaGraph<>::capture(s, k(grid_for(n, 256), 1.0F, x->cview(), y->view(), n));
      y.reset();
      CHECK_FALSE(old_y.expired());  // the graph keeps it
      DeviceBuffer<float> y2 = from_host(lgtest::random_floats(n)).sync_on(s);
      graph.launch_on(s);
      REQUIRE(graph.update_from(k(grid_for(n, 256), 1.0F, x->cview(), y2.view(), n)).ok());
      graph.synchronize();
      graph.launch();  // collects what finished
      CHECK(old_y.expired());
    }
  }

  TEST_CASE("a built graph updated in place, embedded as a child, carries the updated arguments") {
    Buffers b(10'000, 2);
    const auto k = axpy();
    const auto cfg = grid_for(b.n, 256);
    auto inner = CudaGraph<>::build(lgtest::device(), k(cfg, 1.0F, b.dx.cview(), b.ys[0].view(), b.n));
    REQUIRE(inner.update_from(k(cfg, 2.0F, b.dx.cview(), b.ys[1].view(), b.n)).ok());
    auto outer = CudaGraph<>::build(lgtest::device(), child_graph(inner));
    outer.launch();
    CHECK(lgtest::to_host(lgtest::stream(), b.ys[0].cview()) == b.y0[0]);
    CHECK(b.error(1, 2.0F, 1) < 1e-6);
  }

  TEST_CASE("ops that only capture can record are refused by build's Scope and a built graph's update_from") {
    Buffers b(1000, 1);
    auto captured = CudaGraph<>::capture(lgtest::stream(), CaptureOnlyFill{{}, b.ys[0].view()});
    captured.launch();
    CHECK(lgtest::to_host(lgtest::stream(), b.ys[0].cview())[0] == 9.0F);
    CHECK_THROWS_AS(CudaGraph<>::build(lgtest::device(),
                                       [&](Scope& s) {
                                         s.record(CaptureOnlyFill{{}, b.ys[0].view()});
                                       }),
                    UsageError);
    auto built = CudaGraph<>::build(lgtest::device(), fill(b.ys[0].view(), 1.0F));
    CHECK_THROWS_AS((void)built.update_from(CaptureOnlyFill{{}, b.ys[0].view()}), UsageError);
    CHECK(captured.update_from(CaptureOnlyFill{{}, b.ys[0].view()}).ok());
    built.launch();
    CHECK(lgtest::to_host(lgtest::stream(), b.ys[0].cview())[0] == 1.0F);
  }

  TEST_CASE("a graph cannot take part in its own update: UsageError, and the graph keeps working") {
    Buffers b(1000, 1);
    const auto k = axpy();
    for (const bool built : {true, false}) {
      CAPTURE(built);
      b.reset();
      const auto op = k(grid_for(b.n, 256), 1.0F, b.dx.cview(), b.ys[0].view(), b.n);
      auto graph = built ? CudaGraph<>::build(lgtest::device(), op) : CudaGraph<>::capture(lgtest::stream(), op);
      CHECK_THROWS_AS((void)graph.update_from(child_graph(graph)), UsageError);
      CHECK_THROWS_AS((void)graph.update_from([&](Scope& s) {
        s.record(op);
        (void)graph.replay_count();
      }),
                      UsageError);
      graph.launch();
      CHECK(b.error(0, 1.0F, 1) < 1e-6);
    }
  }
}
