// Eight threads at once, in each way of sharing: each thread with its own stream and graph; streams and
// buffers made on the main thread and used by the workers; one graph launched from all of them.
#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/gpu.hpp"
#include "reliability/footprint.hpp"

using namespace lazygraph;

namespace {

constexpr int thread_count = 8;
constexpr int replays = 1000;

using lgtest::Axpy;
using lgtest::axpy;

/// Runs `body(i)` on `thread_count` threads started together; returns the errors they threw.
std::vector<std::string> on_threads(const std::function<void(int)>& body) {
  std::vector<std::string> errors;
  std::mutex errors_mutex;
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  threads.reserve(thread_count);
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < thread_count) std::this_thread::yield();
      try {
        body(t);
      } catch (const std::exception& e) {
        const std::lock_guard<std::mutex> lock(errors_mutex);
        errors.emplace_back(e.what());
      }
    });
  }
  for (auto& th : threads) th.join();
  return errors;
}

}  // namespace

TEST_SUITE("reliability") {
  TEST_CASE("eight threads each capture their own graph on their own stream and replay it") {
    const Axpy k = axpy();
    const int n = 10'000;
    std::vector<std::vector<float>> results(thread_count);
    const auto errors = on_threads([&](int t) {
      Stream s(lgtest::device());
      DeviceBuffer<float> x = ones<float>(n).sync_on(s);
      DeviceBuffer<float> y = zeros<float>(n).sync_on(s);
      auto graph = CudaGraph<>::capture(s, k(grid_for(n, 256), static_cast<float>(t + 1), x.cview(), y.view(), n) >>
                                               k(grid_for(n, 256), 1.0F, x.cview(), y.view(), n));
      for (int i = 0; i < replays; ++i) graph.launch_on(s);
      results[static_cast<std::size_t>(t)] = lgtest::to_host(s, y.cview());
    });
    CHECK(errors.empty());
    for (int t = 0; t < thread_count; ++t) {
      CAPTURE(t);
      const auto& v = results[static_cast<std::size_t>(t)];
      REQUIRE(v.size() == static_cast<std::size_t>(n));
      CHECK(v[0] == static_cast<float>((t + 2) * replays));
      CHECK(v[n - 1] == static_cast<float>((t + 2) * replays));
    }
  }

  TEST_CASE("eight threads capture and replay on streams and buffers made by the main thread") {
    const Axpy k = axpy();
    const int n = 4096;
    std::vector<Stream> streams;
    std::vector<DeviceBuffer<float>> ys;
    DeviceBuffer<float> x = ones<float>(n).sync_on(lgtest::stream());
    for (int t = 0; t < thread_count; ++t) {
      streams.emplace_back(lgtest::device());
      ys.push_back(zeros<float>(n).sync_on(lgtest::stream()));
    }
    const lgtest::Footprint before = lgtest::Footprint::now();
    const auto errors = on_threads([&](int t) {
      const auto i = static_cast<std::size_t>(t);
      for (int round = 0; round < 10; ++round) {
        auto graph = CudaGraph<>::capture(streams[i], all(k(grid_for(n, 256), 1.0F, x.cview(), ys[i].view(), n)));
        for (int r = 0; r < replays / 10; ++r) graph.launch_on(streams[i]);
        streams[i].synchronize();
      }
    });
    CHECK(errors.empty());
    for (int t = 0; t < thread_count; ++t) {
      CHECK(lgtest::to_host(lgtest::stream(), ys[static_cast<std::size_t>(t)].cview())[n - 1] ==
            static_cast<float>(replays));
    }
    const lgtest::Footprint after = lgtest::Footprint::now();
    CHECK(after.handles.graphs == before.handles.graphs);
    CHECK(after.handles.graph_execs == before.handles.graph_execs);
    CHECK(after.handles.device_bytes == before.handles.device_bytes);
  }

  TEST_CASE("one graph launched from eight threads at once runs every replay") {
    const Axpy k = axpy();
    Stream& s = lgtest::stream();
    const int n = 256;
    DeviceBuffer<float> x = ones<float>(n).sync_on(s);
    DeviceBuffer<float> y = zeros<float>(n).sync_on(s);
    auto graph = CudaGraph<>::capture(s, k(grid_for(n, 256), 1.0F, x.cview(), y.view(), n));
    Stream other(lgtest::device());
    const auto errors = on_threads([&](int t) {
      for (int i = 0; i < replays; ++i) {
        if (t % 2 == 0) {
          graph.launch();
        } else {
          graph.launch_on(other);  // replays on another stream mix with those on the graph's own
        }
      }
    });
    CHECK(errors.empty());
    other.synchronize();
    graph.launch();
    CHECK(lgtest::to_host(s, y.cview())[n - 1] == static_cast<float>(thread_count * replays + 1));
  }

  TEST_CASE("eight threads capture in this-thread mode while others allocate, load kernels and replay") {
    const Axpy k = axpy();
    const int n = 1024;
    std::atomic<int> good{0};
    const auto errors = on_threads([&](int t) {
      Stream s(lgtest::device());
      DeviceBuffer<float> x = ones<float>(n).sync_on(s);
      for (int round = 0; round < 20; ++round) {
        DeviceBuffer<float> y = zeros<float>(n).sync_on(s);  // allocations while other threads capture
        if (t == 0 && round % 5 == 0) {                      // and a module load
          const KernelLibraryOptions opts = lgtest::own_kernels(
              {{"noop.cu", "extern \"C\" __global__ void noop(int n) {}\n"}}, lgtest::scratch_directory("threads"));
          const KernelLibrary lib(lgtest::device(), opts);
          lib.get<void(int)>("noop").launch(s, grid_for(1, 32), 1);
          s.synchronize();  // an eager launch does not keep its module loaded; wait before the library goes
        }
        auto graph =
            CudaGraph<>::scope(s, [&](Scope& sc) { sc.record(k(grid_for(n, 256), 2.0F, x.cview(), y.view(), n)); });
        graph.launch();
        if (lgtest::to_host(s, y.cview())[n - 1] == 2.0F) good.fetch_add(1);
      }
    });
    CHECK(errors.empty());
    CHECK(good.load() == thread_count * 20);
  }
}
