// Soak: a million replays and ten thousand capture/destroy cycles leave device memory, host memory and the
// driver objects lazygraph holds where they were.
#include <doctest/doctest.h>

#include "common/gpu.hpp"
#include "reliability/footprint.hpp"

using namespace lazygraph;

using lgtest::axpy;

TEST_SUITE("reliability") {
  TEST_CASE("a million replays count exactly and hold no more memory than one") {
    Stream& s = lgtest::stream();
    const int n = 32;
    DeviceBuffer<float> ones_buffer = ones<float>(n).sync_on(s);
    DeviceBuffer<float> counter = zeros<float>(n).sync_on(s);
    auto graph = CudaGraph<>::capture(s, axpy()(grid_for(n, 32), 1.0F, ones_buffer.cview(), counter.view(), n));
    for (int i = 0; i < 1000; ++i) graph.launch_on(s);  // warm up
    s.synchronize();
    const lgtest::Footprint before = lgtest::Footprint::now();
    constexpr int replays = 1'000'000;
    for (int i = 0; i < replays - 1000; ++i) {
      graph.launch_on(s);
      if (i % 10'000 == 9'999) s.synchronize();
    }
    s.synchronize();
    const auto v = lgtest::to_host(s, counter.cview());
    CHECK(v[0] == static_cast<float>(replays));  // exact: below 2^24
    CHECK(v[n - 1] == static_cast<float>(replays));
    lgtest::Footprint::now().check_flat(before);
  }

  TEST_CASE("ten thousand capture, replay and destroy cycles leave nothing behind") {
    Stream& s = lgtest::stream();
    const int n = 1024;
    DeviceBuffer<float> x = ones<float>(n).sync_on(s);
    DeviceBuffer<float> y = zeros<float>(n).sync_on(s);
    const auto k = axpy();
    const auto cycle = [&] {
      DeviceBuffer<float> scratch = zeros<float>(n).sync_on(s);  // a buffer only the graph holds after this
      auto graph =
          CudaGraph<>::capture(s, all(k(grid_for(n, 256), 1.0F, x.cview(), y.view(), n), fill(scratch.view(), 2.0F)) >>
                                      copy(scratch.view(), y.cview()));
      scratch.reset();
      graph.launch();
    };
    for (int i = 0; i < 100; ++i) cycle();  // warm the pools
    const lgtest::Footprint before = lgtest::Footprint::now();
    for (int i = 0; i < 10'000; ++i) cycle();
    CHECK(lgtest::to_host(s, y.cview())[n - 1] == 10'100.0F);
    lgtest::Footprint::now().check_flat(before);
  }
}
