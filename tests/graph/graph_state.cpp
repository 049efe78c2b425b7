// The graph's replay bookkeeping (detail/graph/graph_state.hpp): updates ordered against replays on any
// stream, and update buffers released once their copies ran. (A Scope kept past its callback: graph/scope.cpp.)
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

/// A kernel that spins for `cycles` clock cycles, then copies `in` to `out`: a replay that is still running
/// when the host queues the next thing.
using SlowCopy = Kernel<void(const float*, float*, int, long long)>;
SlowCopy slow_copy_kernel() {
  static const KernelLibrary library = [] {
    const KernelLibraryOptions opts = lgtest::own_kernels(
        {{"slow_copy.cu",
          "extern \"C\" __global__ void slow_copy(const float* in, float* out, int n, long long cycles) {\n"
          "  const long long start = clock64();\n"
          "  while (clock64() - start < cycles) {}\n"
          "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i];\n"
          "}\n"}},
        lgtest::scratch_directory("slow-copy"));
    return KernelLibrary(lgtest::device(), opts);
  }();
  return library.get<void(const float*, float*, int, long long)>("slow_copy");
}

constexpr long long replay_cycles = 200'000'000;  // about 0.1 s at the clock rates of current GPUs

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("an update after launch_on(another stream) waits for that replay before changing its input") {
    Stream& s = lgtest::stream();
    Stream other(lgtest::device());
    const int n = 1024;
    DeviceBuffer<float> in = empty<float>(n).sync_on(s);
    DeviceBuffer<float> out = zeros<float>(n).sync_on(s);
    auto graph =
        CudaGraph<>::capture(s, slow_copy_kernel()(grid_for(n, 256), in.cview(), out.view(), n, replay_cycles));
    const auto first = lgtest::random_floats(n);
    const auto second = lgtest::random_floats(n);
    graph.update(copy(in.view(), first));
    graph.launch_on(other);                 // still spinning when the next update is queued
    graph.update(copy(in.view(), second));  // must not overwrite the input the replay above reads
    other.synchronize();
    CHECK(lgtest::to_host(s, out.cview()) == first);
    graph.launch();
    CHECK(lgtest::to_host(s, out.cview()) == second);
  }

  TEST_CASE("the buffers of updates are released once their copies ran, not kept until the next launch()") {
    Stream& s = lgtest::stream();
    Stream other(lgtest::device());
    const int n = 1 << 18;  // 1 MiB of floats per update
    DeviceBuffer<float> in = zeros<float>(n).sync_on(s);
    DeviceBuffer<float> out = zeros<float>(n).sync_on(s);
    auto graph = CudaGraph<>::capture(s, copy(out.view(), in.cview()));
    const LiveHandles before = live_handles();
    std::vector<std::weak_ptr<const void>> sources;
    for (int i = 0; i < 1000; ++i) {
      DeviceBuffer<float> source(lgtest::device(), n);
      fill(source.view(), static_cast<float>(i)).sync_on(s);
      sources.emplace_back(source.cview().owner());
      graph.update(copy(in.view(), source.cview()));  // the graph holds `source` until the copy has run
      graph.launch_on(other);
      if (i % 100 == 99) other.synchronize();
    }
    other.synchronize();
    graph.update(copy(in.view(), in.cview()));  // collects what has completed
    std::size_t still_held = 0;
    for (const auto& w : sources) still_held += w.expired() ? 0 : 1;
    CHECK(still_held == 0);
    CHECK(live_handles().device_bytes == before.device_bytes);
    CHECK(lgtest::to_host(s, out.cview())[n - 1] == 999.0F);
  }

  TEST_CASE("destroying a graph waits for its last replay on another stream, not for the whole device") {
    Stream& s = lgtest::stream();
    Stream other(lgtest::device());
    Stream unrelated(lgtest::device());
    const int n = 256;
    DeviceBuffer<float> in = from_host(lgtest::random_floats(n)).sync_on(s);
    DeviceBuffer<float> out = zeros<float>(n).sync_on(s);
    if (lgtest::under_compute_sanitizer()) {
      // The tool runs the device's work one launch at a time, so "not for the whole device" cannot be seen there
      // (a stream held back by a host function held back the graph's destruction under memcheck): check the wait
      // for the graph's own replay only.
      {
        auto graph =
            CudaGraph<>::capture(s, slow_copy_kernel()(grid_for(n, 256), in.cview(), out.view(), n, replay_cycles / 4));
        graph.launch_on(other);
      }
      CHECK(other.query());
      CHECK(lgtest::to_host(s, out.cview()) == lgtest::to_host(s, in.cview()));
      MESSAGE("under compute-sanitizer: only the wait for the graph's own replay is checked");
      return;
    }
    // Work on an unrelated stream that cannot finish until this test says so: a host function waiting for
    // `release`. A destructor that waited for the whole device would wait for it; one that waits for its own
    // replays returns. Launched and destroyed on threads of their own, so that nothing here depends on whether a
    // launch returns before its work runs (it may not under compute-sanitizer).
    std::atomic<bool> release{false};
    std::atomic<bool> blocker_launched{false};
    std::atomic<bool> destroyed{false};
    // The host function gives up after three minutes whatever happens, so that a failure cannot hang the suite.
    auto blocker = CudaGraph<>::capture(unrelated, allow_in_graph(host_call("wait for release", [&release] {
                                          const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(3);
                                          while (!release.load() && std::chrono::steady_clock::now() < until)
                                            std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                        })));
    std::optional<CudaGraph<>> graph(
        CudaGraph<>::capture(s, slow_copy_kernel()(grid_for(n, 256), in.cview(), out.view(), n, replay_cycles / 4)));
    graph->launch_on(other);
    std::thread launcher([&] {
      blocker.launch_on(unrelated);
      blocker_launched = true;
    });
    const auto wait_for = [](const std::atomic<bool>& flag, std::chrono::seconds limit) {
      const auto until = std::chrono::steady_clock::now() + limit;
      while (!flag.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    wait_for(blocker_launched, std::chrono::seconds(5));
    std::thread destroyer([&] {
      graph.reset();
      destroyed = true;
    });
    wait_for(destroyed, std::chrono::seconds(120));
    CHECK(destroyed.load());  // the destructor returned while the unrelated stream still waited
    CHECK(other.query());     // and its replay had finished before the graph went
    release = true;
    destroyer.join();
    launcher.join();
    unrelated.synchronize();
    CHECK(lgtest::to_host(s, out.cview()) == lgtest::to_host(s, in.cview()));
  }
}
