#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {
using lgtest::axpy;

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a recorded graph replays a kernel and a copy, each replay building on the last") {
    Stream& s = lgtest::stream();
    const int n = 100'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    DeviceBuffer<float> dx = from_host(x).sync_on(s);
    DeviceBuffer<float> dy = from_host(y0).sync_on(s);
    DeviceBuffer<float> snapshot = empty<float>(n).sync_on(s);
    auto step = axpy()(grid_for(n, 256), 0.5F, dx.cview(), dy.view(), n) >> copy(snapshot.view(), dy.cview());
    static_assert(GraphNode<decltype(step)>);
    auto graph = CudaGraph<>::scope(s, [&](Scope& sc) { sc.record(step); });
    CHECK(lgtest::to_host(s, dy.cview()) == y0);  // capture ran nothing
    for (int i = 0; i < 5; ++i) graph.launch();
    const auto ref = lgtest::axpy_reference(0.5F, x, y0, 5);
    CHECK(lgtest::relative_error(lgtest::to_host(s, snapshot.cview()), ref) < 1e-6);
    const auto kinds = graph.node_kinds();
    CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::kernel) == 1);
    CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::memcpy) == 1);
  }

  TEST_CASE("capture keeps the recorded op's output, which can be taken once") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = zeros<float>(16).sync_on(s);
    auto graph = CudaGraph<>::capture(
        s, fill(b.view(), 2.0F) >> map(value(b.cview()), [](const DeviceSpan<const float>& v) { return v.size(); }));
    CHECK(graph.take_output() == 16);
    CHECK_THROWS_AS((void)graph.take_output(), UsageError);
    auto g2 = CudaGraph<>::scope(s, [&](Scope& sc) { return sc.record(value(std::string("out"))); });
    CHECK(g2.take_output() == "out");
  }

  TEST_CASE("an exception in the capture callback ends the capture and leaves the stream usable") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = zeros<float>(1024).sync_on(s);
    CHECK_THROWS_WITH_AS(CudaGraph<>::scope(s,
                                            [&](Scope& sc) {
                                              sc.record(fill(b.view(), 3.0F));
                                              CHECK(capture_status(s) == CaptureStatus::active);
                                              throw std::runtime_error("model config is wrong");
                                            }),
                         "model config is wrong", std::runtime_error);
    CHECK(capture_status(s) == CaptureStatus::none);
    fill(b.view(), 5.0F).sync_on(s);  // the stream still works
    const auto v = lgtest::to_host(s, b.cview());
    CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 5.0F; }));
    auto g = CudaGraph<>::capture(s, fill(b.view(), 6.0F));  // and captures again
    g.launch();
    CHECK(lgtest::to_host(s, b.cview())[0] == 6.0F);
  }

  TEST_CASE("a graph keeps the buffers its ops touch alive, and frees them when it goes") {
    Stream& s = lgtest::stream();
    const int n = 64 << 20;  // 256 MiB per buffer
    // Counted in handles, not in the device's free memory, which other processes on the GPU change meanwhile.
    const auto before = live_handles();
    {
      std::optional<CudaGraph<>> graph;
      {
        DeviceBuffer<float> x = ones<float>(n).sync_on(s);
        DeviceBuffer<float> y = zeros<float>(n).sync_on(s);
        graph.emplace(CudaGraph<>::capture(s, axpy()(grid_for(n, 256), 2.0F, x.cview(), y.view(), n)));
      }  // x and y are destroyed here; the graph still points at them
      CHECK(live_handles().device_allocations == before.device_allocations + 2);
      graph->launch();
      graph->launch();
      CHECK(graph->node_count() == 1);
    }
    CHECK(live_handles().device_allocations == before.device_allocations);  // everything went with the graph
  }

  TEST_CASE("a replay after the buffers' owners are gone computes the right values") {
    Stream& s = lgtest::stream();
    const int n = 10'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    DeviceBuffer<float> out = empty<float>(n).sync_on(s);
    std::optional<CudaGraph<>> graph;
    {
      DeviceBuffer<float> dx = from_host(x).sync_on(s);
      DeviceBuffer<float> dy = from_host(y0).sync_on(s);
      graph.emplace(CudaGraph<>::capture(
          s, axpy()(grid_for(n, 128), -1.5F, dx.cview(), dy.view(), n) >> copy(out.view(), dy.cview())));
    }
    graph->launch();
    graph->launch();
    CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), lgtest::axpy_reference(-1.5F, x, y0, 2)) < 1e-6);
  }

  TEST_CASE("update runs an op before the next replay, so a replay reads new input") {
    Stream& s = lgtest::stream();
    const int n = 4096;
    DeviceBuffer<float> in = empty<float>(n).sync_on(s);
    DeviceBuffer<float> out = zeros<float>(n).sync_on(s);
    auto graph = CudaGraph<>::capture(
        s, copy(out.view(), in.cview()) >> axpy()(grid_for(n, 256), 1.0F, in.cview(), out.view(), n));
    for (int round = 0; round < 3; ++round) {
      const auto x = lgtest::random_floats(n);
      graph.update(copy(in.view(), x));
      graph.launch();
      std::vector<double> ref(n);
      for (int i = 0; i < n; ++i) ref[i] = 2.0 * x[i];
      CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), ref) < 1e-6);
    }
  }

  TEST_CASE("launch_on replays asynchronously on another stream") {
    Stream& s = lgtest::stream();
    Stream other(lgtest::device());
    DeviceBuffer<float> b = zeros<float>(256).sync_on(s);
    auto graph = CudaGraph<>::capture(s, fill(b.view(), 9.0F));
    graph.launch_on(other);
    other.synchronize();
    CHECK(lgtest::to_host(s, b.cview())[255] == 9.0F);
  }

  TEST_CASE("destroying a graph waits for a replay still running on another stream before freeing its buffers") {
    Stream& s = lgtest::stream();
    Stream other(lgtest::device());
    const int n = 1 << 22;
    DeviceBuffer<float> out = zeros<float>(n).sync_on(s);
    // Counted in handles, not in the device's free memory, which other processes on the GPU change meanwhile.
    const auto before = live_handles();
    {
      std::optional<CudaGraph<>> graph;
      {
        DeviceBuffer<float> x = ones<float>(n).sync_on(s);
        std::vector<decltype(axpy()(grid_for(n, 256), 1.0F, x.cview(), out.view(), n))> steps;
        steps.reserve(200);
        for (int i = 0; i < 200; ++i) steps.push_back(axpy()(grid_for(n, 256), 1.0F, x.cview(), out.view(), n));
        graph.emplace(CudaGraph<>::capture(s, chain(std::move(steps))));
      }                         // x now lives only in the graph
      graph->launch_on(other);  // 200 kernels, still running when the graph goes
    }
    const auto v = lgtest::to_host(s, out.cview());
    CHECK(v[0] == 200.0F);
    CHECK(v[n - 1] == 200.0F);
    CHECK(live_handles().device_allocations == before.device_allocations);  // x went with the graph
  }

  TEST_CASE("every capture mode captures a working graph") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = zeros<float>(64).sync_on(s);
    for (CaptureMode mode : {CaptureMode::this_thread, CaptureMode::global, CaptureMode::relaxed}) {
      auto graph = CudaGraph<>::capture(s, fill(b.view(), static_cast<float>(mode) + 1.0F), mode);
      graph.launch();
      CHECK(lgtest::to_host(s, b.cview())[0] == static_cast<float>(mode) + 1.0F);
    }
  }

  TEST_CASE("a graph's DOT export names its kernel nodes") {
    Stream& s = lgtest::stream();
    const int n = 1000;
    DeviceBuffer<float> x = ones<float>(n).sync_on(s);
    DeviceBuffer<float> y = zeros<float>(n).sync_on(s);
    auto graph = CudaGraph<>::capture(s, axpy()(grid_for(n, 256), 1.0F, x.cview(), y.view(), n));
    const auto path = lgtest::scratch_directory("dot") / "graph.dot";
    graph.write_dot(path);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str().find("digraph") != std::string::npos);
    CHECK(text.str().find("axpy") != std::string::npos);
  }
}
