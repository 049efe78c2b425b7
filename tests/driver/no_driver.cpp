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
