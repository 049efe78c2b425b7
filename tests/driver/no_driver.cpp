// Run with LAZYGRAPH_CUDA_DRIVER pointing at a missing file (meson test 'no-driver'): the path a machine
// without an NVIDIA driver takes.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

using namespace lazygraph;

TEST_SUITE("no-driver") {
  TEST_CASE("without a driver, gpu_available is false and says why") {
    std::string why;
    CHECK_FALSE(gpu_available(&why));
    CHECK(why.find("cannot load CUDA driver") != std::string::npos);
  }

  TEST_CASE("without a driver, driver_info says it did not load, why (as gpu_available), and no version") {
    const DriverInfo info = driver_info();
    CHECK_FALSE(info.loaded);
    CHECK(info.version == 0);
    CHECK(info.why.find("cannot load CUDA driver") != std::string::npos);
    std::string why;
    CHECK_FALSE(gpu_available(&why));
    CHECK(info.why == why);
  }

  TEST_CASE("without a driver, opening a device throws DriverUnavailable") {
    CHECK_THROWS_WITH_AS(Device::first(), doctest::Contains("cannot load CUDA driver"), DriverUnavailable);
    CHECK_THROWS_AS(Device::count(), DriverUnavailable);
  }

  TEST_CASE("without a driver, NVRTC still compiles kernels") {
    const KernelSource src{"k.cu", "extern \"C\" __global__ void k(float* p) { p[threadIdx.x] = 1.0f; }"};
    const auto opts = nvrtc_options(90, true);
    const CompileResult r = nvrtc_compile(src, {}, opts, true);
    CHECK(r.succeeded());
    CHECK_FALSE(r.image().empty());
  }
}

TEST_SUITE("no-driver") {
  TEST_CASE("without a driver, building ops and composing them touches nothing") {
    DeviceSpan<float> a(0x1000, 8);
    const std::vector<float> host(8, 1.0F);
    auto op = zeros<float>(8) >> (fill(a, 1.0F) >> all_unchecked(copy(a, a.as_const()), copy(a, host)));
    static_assert(!GraphNode<decltype(op)>);
    auto v = map(value(2), [](int x) { return x + 1; });
    static_assert(GraphNode<decltype(v)>);
    CHECK_FALSE(gpu_available());
  }
}

// Run with LAZYGRAPH_CUDA_DRIVER pointing at the CUDA toolkit's stub libcuda (meson test 'stub-driver'): what a
// user sees whose loader path finds lib64/stubs before a driver.
TEST_SUITE("stub-driver") {
  TEST_CASE("the toolkit's stub libcuda is named as such, with the fix, not as a driver lacking functions") {
    std::string why;
    CHECK_FALSE(gpu_available(&why));
    CHECK(why.find("stub library, not a driver") != std::string::npos);
    CHECK(why.find("lib64/stubs") != std::string::npos);
    CHECK(why.find("lacks") == std::string::npos);
    CHECK_THROWS_WITH_AS(Device::first(), doctest::Contains("stub library"), DriverUnavailable);
    CHECK_FALSE(driver_info().loaded);
    CHECK(driver_info().why == why);
  }
}
