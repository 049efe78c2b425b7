// GraphOptions (upload, instantiate flags), UpdateResult, and a graph's counters.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "common/gpu.hpp"

using namespace lazygraph;

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
    names.insert(to_string(s));
    UpdateResult r;
    r.status = s;
    const bool ok = s == UpdateStatus::applied || s == UpdateStatus::reinstantiated;
    CHECK(r.ok() == ok);
    CHECK(static_cast<bool>(r) == ok);
  }
  CHECK(names.size() == std::size(all));
  CHECK(std::string(to_string(UpdateStatus::topology_changed)) == "topology_changed");
}

TEST_SUITE("gpu") {
  TEST_CASE("a graph made without upload is uploaded on request and replays correctly, with any instantiate flags") {
    Stream& s = lgtest::stream();
    const int n = 30'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    auto axpy = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(variant);
      DeviceBuffer<float> dx = from_host(x).sync_on(s);
      DeviceBuffer<float> dy = from_host(y0).sync_on(s);
      GraphOptions options;
      options.upload = false;
      options.use_node_priority = variant == 1;
      options.auto_free_on_launch = variant == 2;
      auto op = axpy(grid_for(n, 256), 1.5F, dx.cview(), dy.view(), n);
      auto graph = variant == 1 ? CudaGraph<>::build(s.device(), op, options) : CudaGraph<>::capture(s, op, options);
      CHECK_FALSE(graph.uploaded());
      graph.upload(s);
      CHECK(graph.uploaded());
      graph.launch();
      std::vector<double> ref(y0.begin(), y0.end());
      for (int i = 0; i < n; ++i) ref[i] = static_cast<float>(1.5 * x[i] + ref[i]);
      CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), ref) < 1e-6);
    }
  }

  TEST_CASE("replay_count counts launches on any stream; owner_count the buffers and kernels kept alive") {
    Stream& s = lgtest::stream();
    const int n = 1000;
    DeviceBuffer<float> a = from_host(lgtest::random_floats(n)).sync_on(s);
    DeviceBuffer<float> b = from_host(lgtest::random_floats(n)).sync_on(s);
    DeviceBuffer<float> c = from_host(lgtest::random_floats(n)).sync_on(s);
    auto axpy = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    auto graph =
        CudaGraph<>::capture(s, axpy(grid_for(n, 256), 1.0F, a.cview(), b.view(), n) >> copy(c.view(), b.cview()));
    CHECK(graph.replay_count() == 0);
    // Three buffers and the kernel's module; duplicates may be kept more than once, never fewer.
    CHECK(graph.owner_count() >= 4);
    const std::size_t owners = graph.owner_count();
    Stream other = s.device().create_stream();
    graph.launch();
    graph.launch_on(other);
    graph.launch_on(s);
    graph.synchronize();
    CHECK(graph.replay_count() == 3);
    CHECK(graph.owner_count() == owners);
  }

  TEST_CASE("a moved-from graph throws UsageError from every call") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> a = from_host(lgtest::random_floats(16)).sync_on(s);
    auto graph = CudaGraph<>::build(s.device(), fill(a.view(), 1.0F));
    auto moved = std::move(graph);
    CHECK_THROWS_AS(graph.launch(), UsageError);
    CHECK_THROWS_AS((void)graph.replay_count(), UsageError);
    CHECK_THROWS_AS((void)graph.owner_count(), UsageError);
    CHECK_THROWS_AS((void)graph.update_from(fill(a.view(), 2.0F)), UsageError);
    CHECK_THROWS_AS(graph.upload(s), UsageError);
    CHECK_THROWS_AS(graph.synchronize(), UsageError);
    CHECK_THROWS_AS((void)child_graph(graph), UsageError);
    moved.launch();
    CHECK(moved.replay_count() == 1);
  }
}
