// GraphOptions (upload, instantiate flags), UpdateResult, and a graph's counters.
#include <doctest/doctest.h>

#include <memory>
#include <set>
#include <string>
#include <utility>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

using lgtest::axpy;

}  // namespace

TEST_CASE("every UpdateStatus has its own name, and only applied and reinstantiated are ok") {
  const UpdateStatus all[] = {UpdateStatus::applied,
                              UpdateStatus::reinstantiated,
                              UpdateStatus::topology_changed,
                              UpdateStatus::node_type_changed,
                              UpdateStatus::function_changed,
                              UpdateStatus::parameters_changed,
                              UpdateStatus::attributes_changed,
                              UpdateStatus::not_supported};
  std::set<std::string> names;
  for (const UpdateStatus s : all) {
    REQUIRE(to_string(s) != nullptr);
    CHECK(std::string(to_string(s)).size() > 0);
    names.insert(to_string(s));
    UpdateResult r;
    r.status = s;
    const bool ok = s == UpdateStatus::applied || s == UpdateStatus::reinstantiated;
    CHECK(r.ok() == ok);
    CHECK(static_cast<bool>(r) == ok);
  }
  CHECK(names.size() == std::size(all));
  CHECK(std::string(to_string(UpdateStatus::applied)) == "applied");
  CHECK(std::string(to_string(UpdateStatus::topology_changed)) == "topology_changed");
  CHECK(std::string(to_string(UpdateStatus::not_supported)) == "not_supported");
  // A value outside the enumerators still names something.
  CHECK(to_string(static_cast<UpdateStatus>(1000)) != nullptr);
}

TEST_CASE("a default UpdateResult is an applied update with no node and no message; GraphOptions' defaults") {
  const UpdateResult r;
  CHECK(r.status == UpdateStatus::applied);
  CHECK(r.ok());
  CHECK_FALSE(r.node.has_value());
  CHECK(r.message.empty());
  CHECK_FALSE(UpdateOptions{}.reinstantiate_on_mismatch);
  const GraphOptions o;
  CHECK(o.mode == CaptureMode::this_thread);
  CHECK(o.upload);
  CHECK_FALSE(o.auto_free_on_launch);
  CHECK_FALSE(o.use_node_priority);
}

TEST_SUITE("gpu") {
  TEST_CASE("a graph is uploaded when instantiated unless GraphOptions says not to") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> a = from_host(lgtest::random_floats(64)).sync_on(s);
    CHECK(CudaGraph<>::build(s.device(), fill(a.view(), 1.0F)).uploaded());
    CHECK(CudaGraph<>::capture(s, fill(a.view(), 1.0F)).uploaded());
    CHECK_FALSE(CudaGraph<>::build(s.device(), fill(a.view(), 1.0F), GraphOptions{.upload = false}).uploaded());
    CHECK_FALSE(CudaGraph<>::capture(s, fill(a.view(), 1.0F), GraphOptions{.upload = false}).uploaded());
  }

  TEST_CASE("a graph made without upload is uploaded on request and replays correctly, with any instantiate flags") {
    Stream& s = lgtest::stream();
    const int n = 30'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    const auto k = axpy();
    for (const bool built : {true, false}) {
      for (int flags = 0; flags < 4; ++flags) {
        CAPTURE(built);
        CAPTURE(flags);
        DeviceBuffer<float> dx = from_host(x).sync_on(s);
        DeviceBuffer<float> dy = from_host(y0).sync_on(s);
        const GraphOptions options{
            .upload = false, .auto_free_on_launch = (flags & 1) != 0, .use_node_priority = (flags & 2) != 0};
        auto op = k(grid_for(n, 256), 1.5F, dx.cview(), dy.view(), n);
        auto graph = built ? CudaGraph<>::build(s.device(), op, options) : CudaGraph<>::capture(s, op, options);
        CHECK(graph.built() == built);
        CHECK_FALSE(graph.uploaded());
        Stream uploader = s.device().create_stream();
        graph.upload(uploader);
        CHECK(graph.uploaded());
        uploader.synchronize();  // upload(stream) promises no order with launches on other streams
        graph.launch();
        graph.launch_on(s);
        graph.synchronize();
        CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), lgtest::axpy_reference(1.5F, x, y0, 2)) < 1e-6);
      }
    }
  }

  TEST_CASE("a graph never uploaded still replays correctly: its first launch uploads it") {
    Stream& s = lgtest::stream();
    const int n = 5000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    DeviceBuffer<float> dx = from_host(x).sync_on(s);
    DeviceBuffer<float> dy = from_host(y0).sync_on(s);
    Stream other = s.device().create_stream();
    auto graph = CudaGraph<>::build(s.device(), axpy()(grid_for(n, 256), -0.5F, dx.cview(), dy.view(), n),
                                    GraphOptions{.upload = false});
    graph.launch_on(other);
    graph.synchronize();
    CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), lgtest::axpy_reference(-0.5F, x, y0, 1)) < 1e-6);
  }

  TEST_CASE("replay_count counts launches on any stream; owner_count the buffers and kernels kept alive") {
    Stream& s = lgtest::stream();
    const int n = 1000;
    DeviceBuffer<float> a = from_host(lgtest::random_floats(n)).sync_on(s);
    DeviceBuffer<float> b = from_host(lgtest::random_floats(n)).sync_on(s);
    DeviceBuffer<float> c = from_host(lgtest::random_floats(n)).sync_on(s);
    const auto k = axpy();
    for (const bool built : {true, false}) {
      CAPTURE(built);
      // b is touched three times, a twice: each buffer counts once, and the kernel once.
      auto op = k(grid_for(n, 256), 1.0F, a.cview(), b.view(), n) >> copy(c.view(), b.cview()) >>
                k(grid_for(n, 256), 0.5F, a.cview(), b.view(), n);
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      CHECK(graph.replay_count() == 0);
      CHECK(graph.owner_count() == 4);  // a, b, c and the kernel
      Stream other = s.device().create_stream();
      graph.launch();
      CHECK(graph.replay_count() == 1);
      graph.launch_on(other);
      graph.launch_on(s);
      graph.launch_on(graph.stream());
      graph.update(fill(c.view(), 1.0F));  // an update is not a replay, and its buffers are not the graph's owners
      graph.synchronize();
      CHECK(graph.replay_count() == 4);
      CHECK(graph.owner_count() == 4);
      for (int i = 0; i < 10; ++i) graph.launch_on(other);
      graph.synchronize();
      CHECK(graph.replay_count() == 14);
      CHECK(graph.owner_count() == 4);
    }
  }

  TEST_CASE("owner_count counts fills' buffers, and one graph of one fill keeps one owner") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> a = from_host(lgtest::random_floats(100)).sync_on(s);
    DeviceBuffer<float> b = from_host(lgtest::random_floats(100)).sync_on(s);
    CHECK(CudaGraph<>::build(s.device(), fill(a.view(), 1.0F)).owner_count() == 1);
    CHECK(CudaGraph<>::build(s.device(), fill(a.view(), 1.0F) >> fill(a.view(), 2.0F)).owner_count() == 1);
    CHECK(CudaGraph<>::capture(s, all(fill(a.view(), 1.0F), fill(b.view(), 2.0F))).owner_count() == 2);
  }

  TEST_CASE("a moved-from graph throws UsageError from every call; the graph it moved to works") {
    Stream& s = lgtest::stream();
    const auto values = lgtest::random_floats(16);
    DeviceBuffer<float> a = from_host(values).sync_on(s);
    DeviceScalar<float> scalar(s, 1.0F);
    for (const bool built : {true, false}) {
      CAPTURE(built);
      auto graph =
          built ? CudaGraph<>::build(s.device(), fill(a.view(), 1.0F)) : CudaGraph<>::capture(s, fill(a.view(), 1.0F));
      auto moved = std::move(graph);
      CHECK_THROWS_AS(graph.launch(), UsageError);
      CHECK_THROWS_AS(graph.launch_on(s), UsageError);
      CHECK_THROWS_AS(graph.synchronize(), UsageError);
      CHECK_THROWS_AS(graph.upload(s), UsageError);
      CHECK_THROWS_AS((void)graph.uploaded(), UsageError);
      CHECK_THROWS_AS((void)graph.built(), UsageError);
      CHECK_THROWS_AS((void)graph.replay_count(), UsageError);
      CHECK_THROWS_AS((void)graph.owner_count(), UsageError);
      CHECK_THROWS_AS((void)graph.node_count(), UsageError);
      CHECK_THROWS_AS((void)graph.node_kinds(), UsageError);
      CHECK_THROWS_AS((void)graph.dependencies(), UsageError);
      CHECK_THROWS_AS((void)graph.edge_counts(), UsageError);
      CHECK_THROWS_AS((void)graph.stream(), UsageError);
      CHECK_THROWS_AS((void)graph.native_handle(), UsageError);
      CHECK_THROWS_AS((void)graph.shared_state(), UsageError);
      CHECK_THROWS_AS(graph.update(fill(a.view(), 3.0F)), UsageError);
      CHECK_THROWS_AS(graph.set(scalar, 2.0F), UsageError);
      CHECK_THROWS_AS((void)graph.update_from(fill(a.view(), 2.0F)), UsageError);
      CHECK_THROWS_AS((void)graph.update_from([&](Scope& sc) { sc.record(fill(a.view(), 2.0F)); }), UsageError);
      CHECK_THROWS_AS((void)child_graph(graph), UsageError);
      // Nothing the failed calls asked for ran: the buffer still holds its values, the scalar its 1.
      CHECK(lgtest::to_host(s, a.cview()) == values);
      CHECK(scalar.read(s) == 1.0F);

      moved.launch();
      CHECK(moved.replay_count() == 1);
      CHECK(moved.built() == built);
      CHECK(lgtest::to_host(s, a.cview()) == std::vector<float>(16, 1.0F));
      // Moving it back makes the first handle usable again.
      graph = std::move(moved);
      CHECK_THROWS_AS(moved.launch(), UsageError);
      graph.launch();
      CHECK(graph.replay_count() == 2);
      a = from_host(values).sync_on(s);  // fresh values (the graphs above kept the old buffer alive)
    }
  }

  TEST_CASE("a moved-from graph with an output throws UsageError from take_output") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> a = from_host(lgtest::random_floats(16)).sync_on(s);
    auto graph = CudaGraph<>::capture(s, fill(a.view(), 1.0F) >> value(42));
    static_assert(std::is_same_v<decltype(graph), CudaGraph<int>>);
    auto moved = std::move(graph);
    CHECK_THROWS_AS((void)graph.take_output(), UsageError);
    CHECK(moved.take_output() == 42);
    CHECK_THROWS_AS((void)moved.take_output(), UsageError);  // once
  }
}
