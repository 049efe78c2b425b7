#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {
using Axpy = Kernel<void(float, const float*, float*, int)>;
Axpy axpy() { return lgtest::kernels().get<void(float, const float*, float*, int)>("axpy"); }

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

  TEST_CASE("all(...) records independent ops as parallel branches that all complete") {
    Stream& s = lgtest::stream();
    const int n = 50'000;
    const auto x = lgtest::random_floats(n);
    DeviceBuffer<float> dx = from_host(x).sync_on(s);
    std::vector<DeviceBuffer<float>> ys;
    std::vector<std::vector<float>> y0;
    for (int b = 0; b < 4; ++b) {
      y0.push_back(lgtest::random_floats(n));
      ys.push_back(from_host(y0.back()).sync_on(s));
    }
    const auto k = axpy();
    const auto cfg = grid_for(n, 256);
    auto branches = all(k(cfg, 1.0F, dx.cview(), ys[0].view(), n) >> k(cfg, 1.0F, dx.cview(), ys[0].view(), n),
                        k(cfg, 2.0F, dx.cview(), ys[1].view(), n), k(cfg, 3.0F, dx.cview(), ys[2].view(), n),
                        fill(ys[3].view(), 7.0F));
    auto graph = CudaGraph<>::capture(s, branches);
    graph.launch();
    CHECK(lgtest::relative_error(lgtest::to_host(s, ys[0].cview()), lgtest::axpy_reference(1.0F, x, y0[0], 2)) < 1e-6);
    CHECK(lgtest::relative_error(lgtest::to_host(s, ys[1].cview()), lgtest::axpy_reference(2.0F, x, y0[1], 1)) < 1e-6);
    CHECK(lgtest::relative_error(lgtest::to_host(s, ys[2].cview()), lgtest::axpy_reference(3.0F, x, y0[2], 1)) < 1e-6);
    const auto filled = lgtest::to_host(s, ys[3].cview());
    CHECK(std::all_of(filled.begin(), filled.end(), [](float v) { return v == 7.0F; }));
    const auto kinds = graph.node_kinds();
    CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::kernel) == 4);
    CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::memset) == 1);
  }

  TEST_CASE("the eager ops allocate, fill and copy as they say") {
    Stream& s = lgtest::stream();
    const auto z = zeros<float>(1000).sync_on(s);
    const auto o = ones<float>(1000).sync_on(s);
    const auto od = ones<double>(10).sync_on(s);
    const auto host = lgtest::random_floats(777);
    const auto h = from_host(host).sync_on(s);
    const auto d = dup(h.cview()).sync_on(s);
    const auto e = empty<int>(0).sync_on(s);
    auto zv = lgtest::to_host(s, z.cview());
    auto ov = lgtest::to_host(s, o.cview());
    auto odv = lgtest::to_host(s, od.cview());
    CHECK(std::all_of(zv.begin(), zv.end(), [](float v) { return v == 0.0F; }));
    CHECK(std::all_of(ov.begin(), ov.end(), [](float v) { return v == 1.0F; }));
    CHECK(std::all_of(odv.begin(), odv.end(), [](double v) { return v == 1.0; }));
    CHECK(lgtest::to_host(s, d.cview()) == host);
    CHECK(e.empty());
    CHECK(map(value(21), [](int v) { return v * 2; }).sync_on(s) == 42);
    const auto pair = all(value(1), fill(DeviceBuffer<float>(lgtest::device(), 4).view(), 1.0F)).sync_on(s);
    CHECK(std::get<0>(pair) == 1);
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
    const Device& dev = lgtest::device();
    const int n = 64 << 20;  // 256 MiB per buffer
    const std::size_t before = dev.free_memory();
    {
      std::optional<CudaGraph<>> graph;
      {
        DeviceBuffer<float> x = ones<float>(n).sync_on(s);
        DeviceBuffer<float> y = zeros<float>(n).sync_on(s);
        graph.emplace(CudaGraph<>::capture(s, axpy()(grid_for(n, 256), 2.0F, x.cview(), y.view(), n)));
      }  // x and y are destroyed here; the graph still points at them
      CHECK(dev.free_memory() + 2ULL * n * sizeof(float) <= before + (64ULL << 20U));
      graph->launch();
      graph->launch();
      CHECK(graph->node_count() == 1);
    }
    CHECK(dev.free_memory() + (64ULL << 20U) >= before);  // everything went with the graph
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
    const std::size_t before = lgtest::device().free_memory();
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
    CHECK(lgtest::device().free_memory() + (64ULL << 20U) >= before);
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
