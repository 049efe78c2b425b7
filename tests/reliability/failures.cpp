// Failure and recovery: exceptions in the middle of a capture, and running out of device memory, leave the
// stream, the device and the process as they were.
#include <doctest/doctest.h>

#include <vector>

#include "common/gpu.hpp"
#include "reliability/footprint.hpp"

using namespace lazygraph;

TEST_SUITE("reliability") {
  TEST_CASE("a thousand exceptions in the middle of captures leak nothing and leave the stream usable") {
    Stream& s = lgtest::stream();
    const auto k = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    const int n = 512;
    DeviceBuffer<float> x = ones<float>(n).sync_on(s);
    DeviceBuffer<float> y = zeros<float>(n).sync_on(s);
    const auto failing_capture = [&](int i) {
      DeviceBuffer<float> scratch = zeros<float>(n).sync_on(s);
      try {
        (void)CudaGraph<>::scope(s, [&](Scope& sc) {
          sc.record(all(k(grid_for(n, 256), 1.0F, x.cview(), y.view(), n), fill(scratch.view(), 1.0F)));
          if (i % 3 == 0) sc.record(copy(scratch.view(), y.cview()));
          if (i % 3 == 1) s.synchronize();  // illegal during capture: a CaptureError
          throw std::runtime_error("mid-capture");
        });
      } catch (const Error&) {
      } catch (const std::runtime_error&) {
      }
    };
    for (int i = 0; i < 30; ++i) failing_capture(i);  // warm the pools
    const lgtest::Footprint before = lgtest::Footprint::now();
    for (int i = 0; i < 1000; ++i) failing_capture(i);
    CHECK(capture_status(s) == CaptureStatus::none);
    lgtest::Footprint::now().check_flat(before);
    CHECK(lgtest::to_host(s, y.cview())[0] == 0.0F);  // nothing recorded ever ran
    auto graph = CudaGraph<>::capture(s, k(grid_for(n, 256), 1.0F, x.cview(), y.view(), n));
    graph.launch();
    CHECK(lgtest::to_host(s, y.cview())[n - 1] == 1.0F);
  }

  TEST_CASE("after the device runs out of memory, everything freed is usable again") {
    const Device& dev = lgtest::device();
    Stream& s = lgtest::stream();
    DeviceBuffer<float> small_buffer = zeros<float>(64).sync_on(s);  // made before the device fills
    const LiveHandles before = live_handles();
    std::vector<DeviceBuffer<char>> hog;
    const std::size_t chunk = 1ULL << 30U;
    bool ran_out = false;
    for (std::size_t i = 0; i < dev.total_memory() / chunk + 2; ++i) {
      try {
        hog.emplace_back(dev, chunk);
      } catch (const CudaError& e) {
        CHECK(e.code() == CUDA_ERROR_OUT_OF_MEMORY);
        ran_out = true;
        break;
      }
    }
    CHECK(ran_out);
    CHECK(hog.size() > 1);
    // With the device full, a capture either works or fails with a typed error, and the stream stays usable.
    try {
      auto full = CudaGraph<>::capture(s, fill(small_buffer.view(), 1.0F));
      full.launch();
    } catch (const CudaError& e) {
      MESSAGE("capture on a full device: " << e.what());
    }
    CHECK(capture_status(s) == CaptureStatus::none);
    hog.clear();
    CHECK(live_handles().device_bytes == before.device_bytes);
    DeviceBuffer<char> big(dev, chunk * 4);  // what was freed is usable again
    auto graph = CudaGraph<>::capture(s, fill(small_buffer.view(), 3.0F));
    graph.launch();
    CHECK(lgtest::to_host(s, small_buffer.cview())[63] == 3.0F);
  }
}
